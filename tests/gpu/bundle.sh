#!/usr/bin/env bash
# bundle.sh — packs what tests/gpu/check.sh runs on a GPU machine into one folder, built here:
# the GPU machine is bare (CUDA, nvcc, CMake, PyTorch; no libyaml, OpenMPI, OpenBLAS or SimGrid,
# no package access), so the check binary travels with the shared libraries it needs that such a
# machine lacks, and with the inputs that need this machine's tools (the qwen3_1b plan, compiled
# here, and piper-sim's prediction of it per GPU type, computed here with SimGrid).
#
#   tests/gpu/bundle.sh BUILD_DIR [OUT_DIR]        (OUT_DIR defaults to BUILD_DIR/gpu-bundle)
#
# The folder:
#   bin/check_kernels       the check (debug info stripped)
#   bin/piper-exec-cuda     the plan runtime (one GPU: needs neither MPI nor NCCL)
#   compare_losses.awk      compares its per-step log with the CPU executor's
#   lib/*.gz                non-system libraries ldd resolves here (OpenBLAS and its Fortran
#                           runtime), compressed: the working tree that travels is capped
#   data/qwen3_1b_<GPU>.plan, data/prediction_<GPU>.tsv, data/sim_<GPU>.txt
#   data/train_<name>.plan, data/train_<name>.cpu.log: small one-device plans and the CPU
#                           executor's 10 steps of them (piper-exec, fp32: it needs MPI and
#                           OpenBLAS, so it runs here), for the GPU run to compare with
#   run                     wrapper: unpacks lib/ once, finds the CUDA libraries on the machine
#                           (the toolkit, or the nvidia-* Python wheels), runs a bin/ program
#   MANIFEST                what was built, where, and what the GPU machine must provide
# CUDA's own libraries (cuBLAS, cuBLASLt: over 500 MB) do not travel: the binary is built
# against CUDA 13 (the runtime is linked statically) and the GPU machine has CUDA 13.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="${1:?usage: bundle.sh BUILD_DIR [OUT_DIR]}"
build="$(cd "$build" && pwd)"
out="${2:-$build/gpu-bundle}"

status="$(cat "$build/cuda_backend.txt" 2>/dev/null || echo "unknown (no cuda_backend.txt: configure $build first)")"
if [ ! -x "$build/tests/gpu/check_kernels" ]; then
  echo "bundle: $build/tests/gpu/check_kernels is not built (CUDA backend: $status)" >&2
  exit 1
fi
for tool in piper-compile piper-exec; do
  [ -x "$build/$tool" ] || { echo "bundle: $build/$tool is not built" >&2; exit 1; }
done

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/data"
cp "$build/tests/gpu/check_kernels" "$out/bin/"
strip --strip-debug "$out/bin/check_kernels"
progs=(check_kernels)
if [ -x "$build/piper-exec-cuda" ]; then
  cp "$build/piper-exec-cuda" "$out/bin/"
  strip --strip-debug "$out/bin/piper-exec-cuda"
  progs+=(piper-exec-cuda)
fi
cp "$here/compare_losses.awk" "$out/"

# Libraries: the C and C++ runtimes are on every Linux machine (and newer there); CUDA's come
# with the GPU machine's toolkit; everything else travels.
expected=()
for prog in "${progs[@]}"; do
while read -r name arrow path rest; do
  [ "$arrow" = "=>" ] || continue
  case "$name" in
    linux-vdso*|ld-linux*|libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|libstdc++.so*|libgcc_s.so*)
      continue ;;
    libcublas*|libcudart*|libnccl*|libcuda.so*|libnvrtc*|libnvJitLink*)
      expected+=("$name"); continue ;;
  esac
  if [ "$path" = "not" ]; then
    echo "bundle: $name is not found here; cannot bundle it" >&2
    exit 1
  fi
  [ -e "$out/lib/$name.gz" ] || gzip -9 -c "$(readlink -f "$path")" > "$out/lib/$name.gz"
done < <(ldd "$out/bin/$prog")
done
mapfile -t expected < <(printf '%s\n' ${expected[@]+"${expected[@]}"} | sed '/^$/d' | sort -u)

# The benchmark's plan and piper-sim's prediction, per GPU type the machine may be.
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
predicted=()
for gpu in H200 H100 A100-80GB; do
  sed "s/^gpu: H200/gpu: $gpu/; s/^name: h200_1/name: ${gpu,,}_1/" "$here/h200_1.yaml" > "$tmp/$gpu.yaml"
  plan="$out/data/qwen3_1b_$gpu.plan"
  if "$build/piper-compile" -q "$here/qwen3_1b_1gpu.yaml" --cluster "$tmp/$gpu.yaml" -o "$plan" \
       > "$tmp/compile.log" 2>&1; then
    if [ -x "$build/tests/gpu/gpu_predict" ]; then
      "$build/tests/gpu/gpu_predict" "$plan" "$out/data/prediction_$gpu.tsv" > "$tmp/predict.log" 2>&1 \
        || { cat "$tmp/predict.log" >&2; echo "bundle: gpu_predict failed for $gpu" >&2; exit 1; }
      [ -x "$build/piper-sim" ] && "$build/piper-sim" "$plan" > "$out/data/sim_$gpu.txt" 2>/dev/null || true
      predicted+=("$gpu: $(cat "$tmp/predict.log")")
    fi
  else
    echo "bundle: qwen3_1b does not compile for one $gpu:" >&2
    cat "$tmp/compile.log" >&2
    exit 1
  fi
done
[ ${#predicted[@]} -gt 0 ] || echo "bundle: gpu_predict is not built (no SimGrid?): no predictions" >&2

# The training comparison: small one-device plans (both families, clipping on the dense one)
# and the CPU executor's 10 steps of each, with the options check.sh gives piper-exec-cuda.
train_opts="--steps 10 --seed 3 --lr 3e-3 --grad-clip 1 -q"
for prog in gpt_single_clip moe_single; do
  "$build/piper-compile" -q "$root/tests/exec_mpi/programs/$prog.yaml" -o "$out/data/train_$prog.plan" \
    > "$tmp/compile.log" 2>&1 || { cat "$tmp/compile.log" >&2; echo "bundle: $prog does not compile" >&2; exit 1; }
  # shellcheck disable=SC2086
  "$build/piper-exec" "$out/data/train_$prog.plan" $train_opts --log "$out/data/train_$prog.cpu.log" \
    > "$tmp/cpu.log" 2>&1 || { cat "$tmp/cpu.log" >&2; echo "bundle: piper-exec fails on $prog" >&2; exit 1; }
done
echo "$train_opts" > "$out/data/train_options.txt"

cat > "$out/run" <<'EOF'
#!/usr/bin/env bash
# run — runs a program of this bundle on the GPU machine: `run check_kernels --kernels`.
# Unpacks the bundled libraries once (into $PIPER_BUNDLE_TMP, default /tmp/piper-gpu-bundle-lib),
# puts them and the machine's CUDA libraries on LD_LIBRARY_PATH, and says what is missing.
set -euo pipefail
dir="$(cd "$(dirname "$0")" && pwd)"
prog="${1:?usage: run PROGRAM [ARGS...]}"; shift
libdir="${PIPER_BUNDLE_TMP:-/tmp/piper-gpu-bundle-lib}"
mkdir -p "$libdir"
for z in "$dir"/lib/*.gz; do
  [ -e "$z" ] || continue
  so="$libdir/$(basename "$z" .gz)"
  [ -e "$so" ] && [ "$so" -nt "$z" ] || gzip -dc "$z" > "$so"
done
cuda=""
for d in "${CUDA_HOME:-/usr/local/cuda}/lib64" /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda-13*/lib64 /usr/local/cuda-13*/lib; do
  [ -e "$d/libcublas.so.13" ] && { cuda="$d"; break; }
done
if [ -z "$cuda" ] && command -v python3 >/dev/null; then
  # the nvidia-cublas wheel PyTorch depends on
  cuda="$(python3 - <<'PY' 2>/dev/null || true
import glob, site, os
for s in site.getsitepackages() + [site.getusersitepackages()]:
    for f in glob.glob(os.path.join(s, "nvidia", "**", "libcublas.so.13"), recursive=True):
        print(os.path.dirname(f)); raise SystemExit
PY
)"
fi
export LD_LIBRARY_PATH="$libdir${cuda:+:$cuda}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
missing="$(ldd "$dir/bin/$prog" | grep 'not found' || true)"
if [ -n "$missing" ]; then
  echo "run: $prog cannot start; missing libraries (CUDA 13's cuBLAS is looked for under CUDA_HOME, /usr/local/cuda and the nvidia Python wheels):" >&2
  echo "$missing" >&2
  exit 127
fi
exec "$dir/bin/$prog" "$@"
EOF
chmod +x "$out/run"

{
  echo "piper GPU bundle"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n) from $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$root" diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "CUDA backend: $status"
  echo "programs: $(cd "$out/bin" && ls | tr '\n' ' ')"
  echo "bundled libraries: $(cd "$out/lib" && ls | sed 's/\.gz$//' | tr '\n' ' ')"
  echo "expected on the GPU machine: ${expected[*]:-none} (CUDA 13)"
  for p in "${predicted[@]}"; do echo "prediction $p"; done
  echo "size: $(du -sh "$out" | cut -f1)"
} > "$out/MANIFEST"
cat "$out/MANIFEST"
