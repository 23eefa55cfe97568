# compare_losses.awk — compares two per-step logs (piper-exec's and piper-exec-cuda's --log: "step
# loss ce aux grad_norm ...", '#' comments): the loss of every step, and the global gradient norm
# where the plan computes one, within a relative tolerance. Prints one line per step, then
# "  ok ..." or "  FAIL ..." (the counts tests/gpu/check.sh reports), and exits 1 on a failure.
# tol1 (default: tol) bounds step 1's loss alone: it depends only on the initial parameters and
# the data, so a tight bound there catches a kernel reading the wrong parameters, which a loss
# near ln(vocabulary) hides under the training tolerance.
#   awk -v name=NAME -v tol=2e-2 [-v tol1=1e-4] -v steps=10 -f compare_losses.awk CPU.log CUDA.log
FNR == 1 { f++ }
/^#/ { next }
f == 1 { cpu[$1] = $2; ncpu[$1] = $5; next }
{ gpu[$1] = $2; ngpu[$1] = $5 }
END {
  if (tol == "") tol = 2e-2
  if (steps == "") steps = 10
  if (tol1 == "") tol1 = tol
  worst = 0; n = 0; bad = 0
  for (s = 1; s <= steps; s++) {
    if (!(s in cpu) || !(s in gpu)) { printf "  FAIL %s: step %d is missing from a log\n", name, s; bad = 1; continue }
    d = cpu[s] - gpu[s]; if (d < 0) d = -d; d /= (cpu[s] != 0 ? cpu[s] : 1); if (d > worst) worst = d
    dn = 0
    if (ncpu[s] > 0) { dn = ncpu[s] - ngpu[s]; if (dn < 0) dn = -dn; dn /= ncpu[s]; if (dn > worst) worst = dn }
    printf "     %s step %2d: loss CPU fp32 %.6f  CUDA bf16 %.6f  rel %.2e   |grad| %.4f / %.4f\n",
           name, s, cpu[s], gpu[s], d, ncpu[s], ngpu[s]
    if (s == 1 && d > tol1) { printf "  FAIL %s: step 1's loss differs by %.2e (tolerance %g)\n", name, d, tol1; bad = 1 }
    n++
  }
  if (bad) exit 1
  if (worst > tol) { printf "  FAIL %s: losses (or norms) differ by up to %.2e (tolerance %g)\n", name, worst, tol; exit 1 }
  printf "  ok   %s: %d steps agree within %.2e (tolerance %g)\n", name, n, worst, tol
}
