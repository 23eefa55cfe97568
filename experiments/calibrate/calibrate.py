#!/usr/bin/env python3
"""calibrate.py — piper-sim against measured and published training step times.

For every row of experiments/data/measured/a100_single_node.csv and a100_multi_node.csv (GPT
models trained with Megatron-DeepSpeed on A100s, published by vTrain) this script writes a piper
program and cluster, compiles them with piper-compile, simulates one step with piper-sim, and
prints the predicted against the measured iteration time, then the mean absolute percentage error
(MAPE) of each file separately. It does the same for the Megatron-LM rows of
experiments/data/measured/README.md (TFLOP/s per GPU predicted against published).

Python only orchestrates: piper compiles and simulates; this script writes inputs, runs the
tools in parallel and does arithmetic on their JSON output.

How each row becomes a program (README.md of the measurements; docs/calibration.md):
  - model: GPT (LayerNorm, GELU 4h MLP, learned positions, tied embeddings, dropout, no flash
    attention) of the row's hidden, heads, layers and sequence; vocabulary 50257 padded to a
    multiple of 128*TP, as Megatron pads it (Megatron-LM rows: 51200);
  - parallelism: TP x DP x PP as given, devices numbered TP fastest, then DP, then PP (Megatron's
    order), 1F1B, micro-batch and global batch as given, mixed precision (bf16 parameters,
    gradients and activations; fp32 optimizer state) with Adam (AdamW without weight decay), no
    sequence parallelism, ZeRO-0;
  - recompute rule (one rule, from the row's configuration only): no recompute when the plan
    fits in the GPU's usable memory (80 GB less the cluster's reserve), else full recompute of
    every layer (Megatron's --checkpoint-activations); the Megatron-LM rows use full recompute,
    as the table says;
  - cluster: configs/clusters/a100_vtrain.yaml (A100 80 GB, 8 per node) with as many nodes as the
    row needs; the Megatron-LM rows run on Selene (configs/clusters/dgx_a100_8.yaml: a 200 Gb/s
    HDR NIC per GPU) with as many nodes as they need.

Fitting (--fit): a coordinate search over the constants named in --fit-keys, minimising the
single-node file's MAPE only (the multi-node file and the Megatron rows stay a test); the best
values are printed in the form of configs/calibration.txt. Plans are compiled once and
re-simulated with --costs for each candidate.

usage: experiments/calibrate/calibrate.py [--build DIR] [--jobs N] [--files single,multi,megatron]
                                          [--rows N] [--fit] [--fit-keys k1,k2] [--costs LIST]
"""
import argparse
import concurrent.futures as cf
import csv
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MEASURED = os.path.join(ROOT, "experiments", "data", "measured")

# Megatron-LM, arXiv 2104.04473, Table 1 (README.md of the measurements): params (B), heads,
# hidden, layers, TP, PP, GPUs, batch, TFLOP/s per GPU. A100 80 GB (Selene), vocabulary 51200,
# sequence 2048, full recompute; micro-batch and schedule not stated (we use MEGATRON_MICRO, 1F1B).
MEGATRON_ROWS = [
    (1.7, 24, 2304, 24, 1, 1, 32, 512, 137),
    (3.6, 32, 3072, 30, 2, 1, 64, 512, 138),
    (7.5, 32, 4096, 36, 4, 1, 128, 512, 142),
    (18.4, 48, 6144, 40, 8, 1, 256, 1024, 135),
    (39.1, 64, 8192, 48, 8, 2, 512, 1536, 138),
]
MEGATRON_MICRO = 1

# --fit starts here (docs/calibration.md): three constants fixed by published measurements or
# by construction, three fitted. gemm_eff: a 16384^3 fp16 GEMM reaches 256 of 312 TFLOP/s on an
# A100; net_eff: NCCL's 8 x A100 all-reduce reaches 231.6 GB/s of bus bandwidth over 300 GB/s
# NVLink (both experiments/data/measured/README.md); gemm_half: one 128-wide tensor-core tile. The
# fitted three: hbm_eff, and the host's time per kernel entry of the Python forward (launch) and
# of the autograd backward (launch_bwd), under piper-sim's host model (launch_model=host) with
# the synchronisation points Megatron has (host_sync=p2p+norm+batch; docs/simulator.md).
FIT_START = ("gemm_eff=0.8205,gemm_half=128,net_eff=0.772,hbm_eff=0.7,launch=110us,launch_bwd=40us,"
             "launch_model=host,host_sync=p2p+norm+batch")
# Physical ranges the fit keeps to. hbm_eff: memory-bound kernels on an A100 reach 70-100 % of
# the HBM bandwidth; the single-node file alone pulls it to ~0.41, absorbing the framework's own
# slowness, and constants fitted so mispredict the multi-node file and the Megatron-LM rows
# (docs/calibration.md).
FIT_BOUNDS = {"hbm_eff": (0.7, 1.0), "net_eff": (0.5, 1.0), "gemm_eff": (0.5, 1.0), "launch_overlap": (0.0, 1.0),
              "comm_slowdown": (0.0, 0.5), "launch": (1e-6, 1e-3), "launch_bwd": (1e-6, 1e-3),
              "gemm_half": (16.0, 2048.0)}


def padded_vocab(tp, vocab=50257):
    q = 128 * tp
    return (vocab + q - 1) // q * q


def read_rows(name):
    with open(os.path.join(MEASURED, name)) as f:
        out = []
        for r in csv.DictReader(f):
            row = {k: int(float(v)) for k, v in r.items() if k != "iter_ms"}
            row["iter_ms"] = float(r["iter_ms"])
            out.append(row)
        return out


def cluster_text(base, gpus):
    """The base cluster file with as many nodes as `gpus` needs (all 8-GPU nodes, or one smaller)."""
    with open(os.path.join(ROOT, "configs", "clusters", base)) as f:
        text = f.read()
    per = min(8, gpus)
    nodes = max(1, gpus // per)
    text = re.sub(r"(?m)^nodes:.*$", "nodes: %d" % nodes, text)
    text = re.sub(r"(?m)^gpus_per_node:.*$", "gpus_per_node: %d" % per, text)
    text = re.sub(r"(?m)^name:.*$", "name: %s_%d" % (os.path.splitext(base)[0], gpus), text)
    return text


def program_text(row, recompute, vocab, cluster_file):
    t, d, p = row["tp"], row["dp"], row["pp"]
    b, G = row["micro_batch"], row["global_batch"]
    m = G // (b * d)
    h = row["hidden"]
    lines = [
        "# generated by experiments/calibrate/calibrate.py",
        "model:",
        "  name: gpt_h%d_l%d" % (h, row["layers"]),
        "  family: gpt",
        "  layers: %d" % row["layers"],
        "  hidden: %d" % h,
        "  heads: %d" % row["heads"],
        "  ffn: %d" % (4 * h),
        "  vocab: %d" % vocab,
        "  seq: %d" % row["seq"],
        "  tied_embeddings: true",
        "  learned_positions: true",
        "  dropout: true",
        "  flash_attention: false",
        "cluster: %s" % cluster_file,
        "batch: {global: %d, micro: %d}" % (G, b),
        "dtype: bf16",
        "optimizer: {name: adamw, weight_decay: 0}",
        "annotations: {pp: %d%s}" % (p, ", tp: true" if t > 1 else ""),
        "directives:",
        "  - {op: split, filter: {}, num_microbatches: %d}" % m,
    ]
    if recompute:
        lines.append("  - {op: recompute, filter: {}, mode: full}")
    for s in range(p):
        lo = s * t * d
        lines.append("  - {op: place, filter: {PP: %d}, devices: \"%d-%d\"}" % (s, lo, lo + t * d - 1))
        if t > 1:
            lines.append("  - {op: shard_tensor, filter: {PP: %d, TP: \"*\"}, devices: \"%d-%d\"}" % (s, lo, lo + t - 1))
        if d > 1:
            devs = ",".join(str(lo + t * k) for k in range(d))
            # DeepSpeed all-reduces the gradients after the backward of the last micro-batch, in
            # buckets of 5e8 elements (reduce_bucket_size): one bucket for every model here
            lines.append("  - {op: replicate, filter: {PP: %d}, devices: [%s], zero: 0, bucket_size: 1GB}" % (s, devs))
    if p > 1:
        lines.append("  - {op: schedule, name: 1f1b}")
    return "\n".join(lines) + "\n"


class Tools:
    def __init__(self, build):
        self.compile = os.path.join(build, "piper-compile")
        self.sim = os.path.join(build, "piper-sim")
        for tool in (self.compile, self.sim):
            if not os.access(tool, os.X_OK):
                sys.exit("calibrate.py: %s is missing; build piper first (cmake --build %s)" % (tool, build))


def prepare(tools, work, key, row, cluster_base, recompute_rule):
    """Writes and compiles the row's program; returns (plan path, recompute, note)."""
    gpus = row["tp"] * row["dp"] * row["pp"]
    cfile = os.path.join(work, "%s.cluster.yaml" % key)
    with open(cfile, "w") as f:
        f.write(cluster_text(cluster_base, gpus))
    vocab = row.get("vocab") or padded_vocab(row["tp"])
    plan = os.path.join(work, "%s.plan" % key)
    tries = [False, True] if recompute_rule == "fit" else [recompute_rule == "full"]
    last = ""
    for rc in tries:
        prog = os.path.join(work, "%s%s.yaml" % (key, ".rc" if rc else ""))
        with open(prog, "w") as f:
            f.write(program_text(row, rc, vocab, os.path.basename(cfile)))
        res = subprocess.run([tools.compile, "-q", prog, "-o", plan], capture_output=True, text=True)
        if res.returncode == 0:
            return plan, rc, ""
        last = res.stderr.strip()
        if "memory" not in last and "usable" not in last:
            return None, rc, "compile failed: " + last.splitlines()[-1][:200]
    # over memory even with full recompute: simulate anyway, flagged
    res = subprocess.run([tools.compile, "-q", "--allow-oom", prog, "-o", plan], capture_output=True, text=True)
    if res.returncode == 0:
        return plan, tries[-1], "over memory"
    return None, tries[-1], "compile failed: " + res.stderr.strip().splitlines()[-1][:200]


def simulate(tools, plan, costs, calib):
    args = [tools.sim, plan, "-q", "--no-check", "--json", "-"]
    if calib:
        args += ["--calib", calib]
    if costs:
        args += ["--costs", costs]
    t0 = time.time()
    res = subprocess.run(args, capture_output=True, text=True)
    if res.returncode != 0:
        return None, res.stderr.strip()[-300:], time.time() - t0
    return json.loads(res.stdout), "", time.time() - t0


def megatron_flops(G, s, l, h, V):
    return 96.0 * G * s * l * h * h * (1 + s / (6.0 * h) + V / (16.0 * l * h))


def collect_rows(args):
    sets = []
    want = args.files.split(",")
    if "single" in want:
        rows = read_rows("a100_single_node.csv")
        if args.rows:
            rows = rows[:: max(1, len(rows) // args.rows)][: args.rows]
        sets.append(("a100_single_node.csv", rows, "a100_vtrain.yaml", "fit"))
    if "multi" in want:
        rows = read_rows("a100_multi_node.csv")
        if args.rows:
            rows = rows[:: max(1, len(rows) // args.rows)][: args.rows]
        sets.append(("a100_multi_node.csv", rows, "a100_vtrain.yaml", "fit"))
    if "megatron" in want:
        rows = []
        for (params, heads, h, l, t, p, gpus, G, tflops) in MEGATRON_ROWS:
            rows.append({"params": params, "heads": heads, "hidden": h, "layers": l, "tp": t, "pp": p,
                         "dp": gpus // (t * p), "gpus": gpus, "global_batch": G, "micro_batch": MEGATRON_MICRO,
                         "seq": 2048, "vocab": 51200, "tflops": tflops})
        sets.append(("megatron", rows, "dgx_a100_8.yaml", "full"))
    return sets


def prepare_all(tools, work, sets, jobs):
    items = []
    with cf.ThreadPoolExecutor(jobs) as ex:
        futs = []
        for name, rows, cbase, rule in sets:
            for i, row in enumerate(rows):
                key = "%s_%03d" % (name.split(".")[0], i)
                futs.append((name, row, ex.submit(prepare, tools, work, key, row, cbase, rule)))
        for name, row, fu in futs:
            plan, rc, note = fu.result()
            items.append({"set": name, "row": row, "plan": plan, "recompute": rc, "note": note})
    return items


def predict(tools, items, costs, calib, jobs):
    """Simulates every prepared item; fills item['pred_ms'] (or None) and item['sim_s']."""
    with cf.ThreadPoolExecutor(jobs) as ex:
        futs = {ex.submit(simulate, tools, it["plan"], costs, calib): it for it in items if it["plan"]}
        for fu in cf.as_completed(futs):
            it = futs[fu]
            js, err, secs = fu.result()
            it["sim_s"] = secs
            it["pred_ms"] = js["step_seconds"] * 1e3 if js else None
            it["activities"] = js["activities"] if js else 0
            if err:
                it["note"] = (it["note"] + "; " if it["note"] else "") + "simulation failed: " + err
    for it in items:
        if not it["plan"]:
            it["pred_ms"] = None


def errors(items, name):
    """Absolute percentage errors of a set (Megatron rows: on TFLOP/s per GPU)."""
    out = []
    for it in items:
        if it["set"] != name or it["pred_ms"] is None:
            continue
        r = it["row"]
        if name == "megatron":
            fl = megatron_flops(r["global_batch"], r["seq"], r["layers"], r["hidden"], r["vocab"])
            pred = fl / (it["pred_ms"] / 1e3) / r["gpus"] / 1e12
            it["pred_tflops"] = pred
            out.append(abs(pred - r["tflops"]) / r["tflops"])
        else:
            out.append(abs(it["pred_ms"] - r["iter_ms"]) / r["iter_ms"])
    return out


def mape(items, name):
    e = errors(items, name)
    return sum(e) / len(e) if e else float("nan")


def describe(r):
    return "G=%d b=%d h=%d a=%d l=%d s=%d TP%d DP%d PP%d" % (
        r["global_batch"], r["micro_batch"], r["hidden"], r["heads"], r["layers"], r["seq"], r["tp"], r["dp"], r["pp"])


def report(items, sets, verbose):
    for name, rows, _, _ in sets:
        sel = [it for it in items if it["set"] == name]
        print("\n== %s (%d rows)" % (name, len(sel)))
        if name == "megatron":
            print("  %-6s %-40s %9s %9s %7s  %s" % ("params", "configuration", "published", "predicted", "error", "note"))
        elif verbose:
            print("  %-46s %10s %10s %7s  %s" % ("configuration", "measured", "predicted", "error", "note"))
        errs = errors(items, name)
        for it in sel:
            r = it["row"]
            note = ("recompute" if it["recompute"] else "") + ("; " + it["note"] if it["note"] else "")
            if name == "megatron":
                pt = it.get("pred_tflops")
                print("  %-6s %-40s %9.1f %9s %6s  %s" % (
                    "%.1fB" % r["params"], describe(r), r["tflops"], "%.1f" % pt if pt else "-",
                    "%+.1f%%" % (100 * (pt - r["tflops"]) / r["tflops"]) if pt else "-", note))
            elif verbose:
                pm = it["pred_ms"]
                print("  %-46s %10.1f %10s %6s  %s" % (
                    describe(r), r["iter_ms"], "%.1f" % pm if pm else "-",
                    "%+.1f%%" % (100 * (pm - r["iter_ms"]) / r["iter_ms"]) if pm else "-", note))
        if name != "megatron":
            ranked = sorted((it for it in sel if it["pred_ms"]), key=lambda it: -abs(it["pred_ms"] / it["row"]["iter_ms"] - 1))
            print("  worst rows:")
            for it in ranked[:5]:
                r = it["row"]
                print("    %-46s measured %8.1f ms, predicted %8.1f ms (%+.1f%%)%s" % (
                    describe(r), r["iter_ms"], it["pred_ms"], 100 * (it["pred_ms"] / r["iter_ms"] - 1),
                    " [recompute]" if it["recompute"] else ""))
        skipped = [it for it in sel if it["pred_ms"] is None]
        for it in skipped:
            print("  skipped %s: %s" % (describe(it["row"]), it["note"]))
        if errs:
            print("  MAPE %.2f %% over %d rows (max %.1f %%)" % (100 * sum(errs) / len(errs), len(errs), 100 * max(errs)))


def write_csv(path, items):
    cols = ["set", "gpus", "global_batch", "micro_batch", "hidden", "heads", "layers", "seq", "tp", "dp", "pp",
            "measured_ms", "predicted_ms", "published_tflops", "predicted_tflops", "recompute", "note"]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for it in items:
            r = it["row"]
            w.writerow([it["set"], r["tp"] * r["dp"] * r["pp"], r["global_batch"], r["micro_batch"], r["hidden"],
                        r["heads"], r["layers"], r["seq"], r["tp"], r["dp"], r["pp"], r.get("iter_ms", ""),
                        "%.3f" % it["pred_ms"] if it["pred_ms"] else "", r.get("tflops", ""),
                        "%.2f" % it["pred_tflops"] if it.get("pred_tflops") else "", int(bool(it["recompute"])),
                        it["note"]])


def fit(tools, items, keys, start, fixed, calib, jobs):
    """Coordinate search on the single-node rows: each key in turn, multiplicative steps that
    shrink when no move helps."""
    fit_items = [it for it in items if it["set"] == "a100_single_node.csv" and it["plan"]]
    cur = dict(start)
    step = {k: 0.5 for k in keys}

    def cost_of(vals):
        spec = ",".join(["%s=%.6g" % (k, v) for k, v in sorted(vals.items())] + fixed)
        predict(tools, fit_items, spec, calib, jobs)
        return mape(fit_items, "a100_single_node.csv")

    best = cost_of(cur)
    print("fit: start %s -> MAPE %.3f %%" % (cur, 100 * best), flush=True)
    for rnd in range(8):
        moved = False
        for k in keys:
            for sign in (+1, -1):
                trial = dict(cur)
                if k.endswith("_eff") or k in ("launch_overlap", "comm_slowdown"):
                    trial[k] = cur[k] + sign * step[k] * 0.2
                else:
                    trial[k] = cur[k] * (1 + step[k]) ** sign
                lo, hi = FIT_BOUNDS.get(k, (-math.inf, math.inf))
                trial[k] = min(hi, max(lo, trial[k]))
                if trial[k] == cur[k]:
                    continue
                c = cost_of(trial)
                print("fit: round %d %s=%.6g -> MAPE %.3f %%" % (rnd, k, trial[k], 100 * c), flush=True)
                if c < best - 1e-5:
                    best, cur, moved = c, trial, True
                    break
        if not moved:
            for k in keys:
                step[k] /= 2
            if max(step.values()) < 0.02:
                break
    print("fit: best %s -> single-node MAPE %.3f %%" % (cur, 100 * best))
    return cur


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="build folder with piper-compile and piper-sim")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--files", default="single,multi,megatron", help="which sets: single, multi, megatron")
    ap.add_argument("--rows", type=int, default=0, help="only about this many rows per file (a spread sample)")
    ap.add_argument("--costs", default="", help="extra --costs for piper-sim")
    ap.add_argument("--calib", default="", help="--calib FILE for piper-sim (default: its built-in calibration)")
    ap.add_argument("--fit", action="store_true", help="fit the constants of --fit-keys on the single-node file")
    ap.add_argument("--fit-keys", default="hbm_eff,launch,launch_bwd",
                    help="constants to fit (the others stay as --costs, else FIT_START, says)")
    ap.add_argument("--work", default="", help="keep generated programs and plans here")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every row")
    ap.add_argument("--csv", default="", help="also write every row's prediction to this CSV file")
    args = ap.parse_args()

    tools = Tools(os.path.abspath(args.build))
    work = args.work or tempfile.mkdtemp(prefix="piper-calib-")
    os.makedirs(work, exist_ok=True)
    sets = collect_rows(args)
    t0 = time.time()
    items = prepare_all(tools, work, sets, args.jobs)
    t1 = time.time()
    print("compiled %d programs in %.1f s (work folder %s)" % (sum(1 for it in items if it["plan"]), t1 - t0, work))
    if args.fit:
        start, fixed = {}, []
        for k in args.fit_keys.split(","):
            start[k] = {"gemm_eff": 0.82, "gemm_half": 128, "launch": 4e-6, "launch_bwd": 4e-6, "launch_overlap": 0.0,
                        "hbm_eff": 1.0, "net_eff": 1.0, "comm_slowdown": 0.0}.get(k, 1.0)
        for kv in filter(None, (args.costs or FIT_START).split(",")):
            k, _, v = kv.partition("=")
            if k in start:
                start[k] = float(re.sub(r"us$", "e-6", v))
            else:
                fixed.append(kv)
        best = fit(tools, items, args.fit_keys.split(","), start, fixed, args.calib or "none", args.jobs)
        args.costs = ",".join(["%s=%.6g" % (k, v) for k, v in sorted(best.items())] + fixed)
        print("A100 " + " ".join(["%s=%.4g" % (k, v) for k, v in sorted(best.items())] + fixed))
    predict(tools, items, args.costs, args.calib, args.jobs)
    t2 = time.time()
    report(items, sets, args.verbose)
    if args.csv:
        write_csv(args.csv, items)
    sims = [it for it in items if it.get("sim_s")]
    if sims:
        slow = max(sims, key=lambda it: it["sim_s"])
        print("\nsimulated %d steps in %.1f s wall (%d jobs); slowest %.1f s (%s, %d activities)" % (
            len(sims), t2 - t1, args.jobs, slow["sim_s"], describe(slow["row"]), slow["activities"]))


if __name__ == "__main__":
    main()
