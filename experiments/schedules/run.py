#!/usr/bin/env python3
"""run.py — every pipeline schedule of piper's library, simulated next to its closed form.

Two tables, written as CSV under experiments/schedules/results/ (not part of ctest):

schedules.csv — every schedule at p = 4, 8 and 16 ranks (m = 2p micro-batches), compiled from a
  program with a `schedule` directive and simulated with unit costs and free communication
  (piper-sim --costs unit:F=1,B=2,BI=1,BW=1,nocomm; an overlapped F&B pair then takes
  F&B = F + B = 3). One row per rank:
    idle_sim / idle_closed     idle time of the rank (step makespan - busy), formulas.md
    act_chunks_sim / _closed   activations held at the rank's peak, in chunk-micro-batches (the
                               simulated peak bytes decomposed into whole micro-batches of the
                               rank's chunks); the closed form where formulas.md gives one
    act_peak_bytes             the simulated activation peak in bytes
    param_bytes                the rank's parameter bytes (piper-sim's memory breakdown)
    layers_sim / layers_closed transformer layers the rank holds: L/p (DualPipe: 2L/p)
  The model is a GPT of 32 tiny layers (so that 2p = 32 stages divide it), so bytes are small;
  what matters is the ratios. DualPipe runs on the same model with untied embeddings (piper
  refuses tied ones with it) and holds each rank's layers twice (stage p+i mirrors stage i).

moe.csv — the DualPipe(V) comparison on a MoE model with expert parallelism: qwen3_9b on one
  8 x H200 node, 4 pipeline ranks of 2 GPUs each, experts sharded over each rank's two GPUs
  (all-to-all on its own stream), m = 8, piper's cost model (not unit costs). For 1f1b, zb-h1,
  zbv, dualpipev, dualpipev with every overlapped pair run as F then B ("dualpipev-noovl",
  the same order without overlap) and dualpipe (4 annotated stages, mirrored with their EP/DP
  groups onto the opposite rank; qwen3_9b's embeddings are untied): step time, tokens/s,
  per-rank idle and exposed communication, peak memory and its activation and parameter parts.

A figure of each schedule's per-rank grid at p = 4 is drawn with piper-viz when --figures is
given (results/figures/, SVG; not meant for committing).

--check recomputes both tables into a scratch folder and compares them with the committed files
in results/, naming the first row that differs (ctest `results`: the committed figures must be
what the code produces; after a change that moves them, rerun without --check and commit).

usage: run.py [--build DIR] [--out DIR] [--figures] [--check]   (default build: build, out: results/)
"""
import argparse
import csv
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
UNIT = "unit:F=1,B=2,BI=1,BW=1,nocomm"
F, B, BI, BW, FB = 1, 2, 1, 1, 3
LAYERS = 32

SCHEDULES = ["gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zb-h2", "zbv", "dualpipe", "dualpipev"]


def layout_rank(kind, p, s):
    if kind == "interleaved-1f1b":
        return s % p
    if kind in ("zbv", "dualpipev", "dualpipe"):
        return s if s < p else 2 * p - 1 - s
    return s


def stages_of(kind, p):
    # dualpipe: the program annotates p stages; the schedule makes the mirrored p..2p-1 itself
    return 2 * p if kind in ("interleaved-1f1b", "zbv", "dualpipev") else p


def closed_idle(kind, p):
    """formulas.md, idle per rank, with F = BI = BW = 1, B = 2, F&B = 3."""
    return {
        "gpipe": (p - 1) * (F + B),
        "1f1b": (p - 1) * (F + B),
        "interleaved-1f1b": (p - 1) * (F + B),
        "zb-h1": (p - 1) * (F + BI - BW),
        "zb-h2": (p - 1) * max(F, F + BI - 2 * BW),
        "zbv": p - 1,
        "dualpipe": p - 2,
        "dualpipev": (p - 1) * (FB + B - 3 * BW),
    }[kind]


def closed_act(kind, p, m, r):
    """formulas.md, activations held at the peak (chunk-micro-batches); None where it gives none."""
    v = 2
    if kind == "gpipe":
        return m
    if kind == "1f1b":
        return p - r
    if kind == "dualpipe":
        return p + 1
    if r != 0:
        return None
    return {"interleaved-1f1b": v * p + p - 1, "zb-h1": p, "zb-h2": 2 * p - 1, "zbv": 2 * p,
            "dualpipev": 2 * p + 1}[kind]


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode:
        raise RuntimeError("%s failed (%d): %s" % (" ".join(cmd), r.returncode, r.stderr.strip()))
    return r.stdout


def write_program(path, kind, p, S, m, model, cluster, ep=False, sched_line=None):
    with open(path, "w") as f:
        f.write("model: %s\ncluster: %s\n" % (model, cluster))
        f.write("batch: {global: %d, micro: 1}\n" % (m * (2 if ep else 1)))
        f.write("annotations: {pp: %d%s}\ndirectives:\n" % (S, ", ep: true" if ep else ""))
        f.write("  - {op: split, filter: {}, num_microbatches: %d}\n" % m)
        for s in range(S):
            r = layout_rank(kind, p, s)
            if ep:
                f.write("  - {op: place, filter: {PP: %d}, devices: [%d, %d]}\n" % (s, r, r + p))
                f.write("  - {op: replicate, filter: {PP: %d}, devices: [%d, %d]}\n" % (s, r, r + p))
                f.write('  - {op: shard, filter: {PP: %d, EP: "*"}, devices: [%d, %d], stream: ep}\n' % (s, r, r + p))
            else:
                f.write("  - {op: place, filter: {PP: %d}, devices: [%d]}\n" % (s, r))
        f.write("  - %s\n" % (sched_line or "{op: schedule, name: %s}" % kind))


def read_plan(path):
    """Per device: activation bytes one micro-batch of each chunk saves, and the layers it holds."""
    lists, devices, cur = {}, {}, None
    section = None
    with open(path) as f:
        for line in f:
            m = re.match(r"list (\d+) ", line)
            if m:
                cur = lists.setdefault(int(m.group(1)), {"bufs": {}, "chunk": {}, "layers": set()})
                section = "list"
                continue
            if line.startswith("devices "):
                section = "devices"
                continue
            if section == "devices":
                m = re.match(r"\s+(\d+) .*list=(\d+)", line)
                if m:
                    devices[int(m.group(1))] = int(m.group(2))
                continue
            if section != "list":
                continue
            m = re.match(r"\s+buf (\d+) \S+ bytes=(\d+) mem=(\w+)", line)
            if m:
                cur["bufs"][int(m.group(1))] = (int(m.group(2)), m.group(3))
                continue
            m = re.match(r"\s+\d+ compute .*pass=F region=(\S+) .*mb=(-?\d+) stage=(-?\d+)(?: reads=\S+)?(?: writes=(\S+))?", line)
            if m:
                lm = re.match(r"L(\d+)\.", m.group(1))
                if lm:
                    cur["layers"].add(int(lm.group(1)))
                st, mb = int(m.group(3)), int(m.group(2))
                # a stage's first micro-batch: 0, or m/2 for DualPipe's mirrored stages
                first = cur.setdefault("first_mb", {}).setdefault(st, mb)
                if mb == first and m.group(4):
                    for b in m.group(4).split(","):
                        nbytes, mem = cur["bufs"].get(int(b), (0, ""))
                        if mem == "activations":
                            cur["chunk"][st] = cur["chunk"].get(st, 0) + nbytes
    return {d: lists[l] for d, l in devices.items()}


def chunks_at_peak(peak, chunk_bytes):
    """Decompose a peak into whole chunk-micro-batches: the counts whose bytes add up exactly."""
    sizes = sorted(chunk_bytes.values())
    if not sizes:
        return None
    totals = set()
    if len(sizes) == 1:
        if peak % sizes[0] == 0:
            totals.add(peak // sizes[0])
    else:
        for n1 in range(0, 200):
            rest = peak - n1 * sizes[1]
            if rest < 0:
                break
            if rest % sizes[0] == 0:
                totals.add(rest // sizes[0] + n1)
    return totals.pop() if len(totals) == 1 else None


def simulate(build, plan, flags):
    out = run([os.path.join(build, "piper-sim"), plan, "--json", "-", "-q"] + flags)
    return json.loads(out)


def schedules_table(build, work, out, figures):
    model = os.path.join(work, "gpt_tiny32.yaml")
    with open(os.path.join(ROOT, "tests/fixtures/schedules/gpt_tiny8.yaml")) as f:
        text = re.sub(r"(?m)^layers: \d+", "layers: %d" % LAYERS, f.read())
    with open(model, "w") as f:
        f.write(re.sub(r"(?m)^name: \S+", "name: gpt_tiny32", text))
    untied = os.path.join(work, "gpt_tiny32_untied.yaml")
    with open(untied, "w") as f:
        f.write(re.sub(r"(?m)^name: \S+", "name: gpt_tiny32_untied", text) + "tied_embeddings: false\n")
    cluster = os.path.join(work, "a100_16.yaml")
    with open(os.path.join(ROOT, "configs/clusters/dgx_a100_8.yaml")) as f:
        text = f.read()
    with open(cluster, "w") as f:
        f.write(re.sub(r"(?m)^nodes: \d+", "nodes: 2", re.sub(r"(?m)^name: \S+", "name: a100_16", text)))
    rows = []
    for p in (4, 8, 16):
        m = 2 * p
        for kind in SCHEDULES:
            S = stages_of(kind, p)
            base = {"schedule": kind, "p": p, "m": m, "stages": 2 * p if kind == "dualpipe" else S}
            prog = os.path.join(work, "%s_p%d.yaml" % (kind, p))
            plan = prog + ".plan"
            write_program(prog, kind, p, S, m, untied if kind == "dualpipe" else model, cluster)
            run([os.path.join(build, "piper-compile"), "-q", prog, "-o", plan])
            res = simulate(build, plan, ["--costs", UNIT])
            info = read_plan(plan)
            for dev in res["per_device"]:
                r = dev["device"]
                if r >= p:
                    continue  # the cluster's other GPUs run nothing
                peak = int(round(dev["peak_by_category"]["activations"]))
                n = chunks_at_peak(peak, info[r]["chunk"])
                ca = closed_act(kind, p, m, r)
                rows.append(dict(base, rank=r, idle_sim=round(dev["idle_seconds"], 9),
                                 idle_closed=closed_idle(kind, p), act_chunks_sim=n if n is not None else "",
                                 act_chunks_closed=ca if ca is not None else "", act_peak_bytes=peak,
                                 param_bytes=int(round(dev["peak_by_category"]["params"])),
                                 layers_sim=len(info[r]["layers"]),
                                 layers_closed=(2 if kind == "dualpipe" else 1) * LAYERS // p,
                                 note="untied embeddings" if kind == "dualpipe" else ""))
            if figures and p == 4:
                os.makedirs(os.path.join(out, "figures"), exist_ok=True)
                run([os.path.join(build, "piper-viz"), "schedule", plan, "--unit", "--title",
                     "%s, p = %d, m = %d" % (kind, p, m), "-o", os.path.join(out, "figures", "%s_p4.svg" % kind)])
            print("%-17s p=%-2d idle sim %s closed %s" % (kind, p, sorted({x["idle_sim"] for x in rows[-p:]}),
                                                         closed_idle(kind, p)), file=sys.stderr)
    path = os.path.join(out, "schedules.csv")
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    return path


def moe_table(build, work, out):
    model = os.path.join(ROOT, "configs/models/qwen3_9b.yaml")
    cluster = os.path.join(ROOT, "configs/clusters/h200_8.yaml")
    p, m = 4, 8
    rows = []
    variants = [("1f1b", "1f1b", None), ("zb-h1", "zb-h1", None), ("zbv", "zbv", None),
                ("dualpipev", "dualpipev", None), ("dualpipev-noovl", "dualpipev", "noovl"),
                ("dualpipe", "dualpipe", None)]
    for name, kind, variant in variants:
        S = stages_of(kind, p)
        prog = os.path.join(work, "moe_%s.yaml" % name)
        line = None
        if variant == "noovl":
            csv_path = os.path.join(work, "moe_dualpipev.csv")
            run([os.path.join(build, "piper-compile"), "-q", os.path.join(work, "moe_dualpipev.yaml"),
                 "--emit-order", csv_path])
            with open(csv_path) as f:
                seq = re.sub(r"\((\d+[FBIW]\d+);(\d+[FBIW]\d+)\)OVERLAP_F_B", r"\1,\2", f.read())
            seq_path = os.path.join(work, "moe_dualpipev_noovl.csv")
            with open(seq_path, "w") as f:
                f.write(seq)
            line = "{op: schedule, file: %s}" % seq_path
        write_program(prog, kind, p, S, m, model, cluster, ep=True, sched_line=line)
        plan = prog + ".plan"
        run([os.path.join(build, "piper-compile"), "-q", prog, "-o", plan])
        res = simulate(build, plan, [])
        for dev in res["per_device"]:
            if dev["device"] >= p:
                continue  # the other GPU of each rank does the same
            rows.append({"schedule": name, "p": p, "m": m, "gpus": 2 * p, "step_seconds": res["step_seconds"],
                         "tokens_per_second": res["tokens_per_second"], "mfu": res["mfu"], "rank": dev["device"],
                         "compute_seconds": dev["compute_seconds"], "exposed_comm_seconds": dev["exposed_comm_seconds"],
                         "idle_seconds": dev["idle_seconds"], "peak_bytes": dev["peak_bytes"],
                         "activation_bytes": dev["peak_by_category"]["activations"],
                         "param_bytes": dev["peak_by_category"]["params"]})
        print("moe %-16s step %.4f s" % (name, res["step_seconds"]), file=sys.stderr)
    path = os.path.join(out, "moe.csv")
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    ap.add_argument("--figures", action="store_true")
    ap.add_argument("--check", action="store_true", help="compare with the files in --out instead of writing them")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="piper-schedules-") as work:
        out = os.path.join(work, "results") if a.check else a.out
        os.makedirs(out, exist_ok=True)
        made = [schedules_table(a.build, work, out, a.figures and not a.check), moe_table(a.build, work, out)]
        if not a.check:
            print("\n".join(made))
            return
        bad = 0
        for path in made:
            committed = os.path.join(a.out, os.path.basename(path))
            shown = os.path.relpath(committed, ROOT)
            if not os.path.exists(committed):
                print("%s: missing; run experiments/schedules/run.py to write it" % shown)
                bad += 1
                continue
            with open(committed) as f:
                old = f.read().splitlines()
            with open(path) as f:
                new = f.read().splitlines()
            diff = next((i for i in range(max(len(old), len(new)))
                         if i >= len(old) or i >= len(new) or old[i] != new[i]), None)
            if diff is None:
                print("%s: %d rows, as the code produces them" % (shown, len(old) - 1))
                continue
            bad += 1
            print("%s:%d: the committed row differs from what the code produces; rerun "
                  "experiments/schedules/run.py --build BUILD and commit the file if the change is meant" % (shown, diff + 1))
            print("  committed: %s" % (old[diff] if diff < len(old) else "(no row)"))
            print("  produced:  %s" % (new[diff] if diff < len(new) else "(no row)"))
        sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
