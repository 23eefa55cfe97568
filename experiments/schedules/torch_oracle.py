#!/usr/bin/env python3
"""torch_oracle.py — write PyTorch's pipeline orders as piper order files (oracle fixtures).

Development-time only (needs `pip install torch`; never a runtime or CI dependency). For p = 4
ranks and m = 8 micro-batches it asks torch.distributed.pipelining for the per-rank orders of
1F1B, Interleaved1F1B (2 chunks per rank), ZBVZeroBubble and DualPipeV and writes them in
PyTorch's own CSV notation (one row per rank, `0F3`, `2I1`, `(0F7;7B3)OVERLAP_F_B`, empty cell =
idle), keeping compute actions only. tests/sched_schedules/ checks that piper's builders produce
the same orders. The schedules are built without a process group: the constructors only read
the stage objects' sizes and ranks, so plain namespaces stand in for real stages.

PyTorch's *printed* order for plain 1F1B (Schedule1F1B.pipeline_order) starts the last rank at
micro-batch 1 (an off-by-one in its printing code, not in what it runs), so for 1F1B this script
records the *runtime* order instead: it runs Schedule1F1B._step_microbatches on a stage object
that records each forward_one_chunk / backward_one_chunk call.

usage: torch_oracle.py [OUTDIR]   (default: tests/fixtures/schedules next to this repo's root)
"""
import os
import sys
import warnings
from types import SimpleNamespace

warnings.filterwarnings("ignore")
import torch.distributed.pipelining.schedules as S  # noqa: E402

P, M = 4, 8


def fake_stages(rank, indices, nstages):
    return [SimpleNamespace(group_size=P, group_rank=rank, num_stages=nstages, stage_index=i,
                            is_first=i == 0, is_last=i == nstages - 1, submod=None)
            for i in indices]


def compute_only(order):
    """Rows of cells: compute actions as PyTorch prints them, idle slots as ''."""
    rows = []
    for rank in sorted(order):
        row = []
        for a in order[rank]:
            if a is None:
                row.append("")
            elif a.is_compute_op:
                row.append(str(a))
        while row and row[-1] == "":
            row.pop()
        rows.append(row)
    return rows


class RecordingStage:
    """Just enough of a pipeline stage for Schedule1F1B's runtime loop: records compute calls."""

    def __init__(self, rank):
        self.stage_index, self.num_stages, self.group_size, self.group_rank = rank, P, P, rank
        self.is_first, self.is_last, self.submod, self.log = rank == 0, rank == P - 1, None, []

    def forward_one_chunk(self, mb, *a, **k):
        self.log.append(f"{self.stage_index}F{mb}")

    def backward_one_chunk(self, mb, *a, **k):
        self.log.append(f"{self.stage_index}B{mb}")

    def __getattr__(self, name):  # every communication helper: no operations
        return lambda *a, **k: []


def runtime_1f1b():
    rows = []
    for r in range(P):
        st = RecordingStage(r)
        s = S.Schedule1F1B(st, M)
        for hook in ("_initialize_stage", "_maybe_compute_loss", "_maybe_get_loss", "_update_losses"):
            setattr(s, hook, lambda *a, **k: None)
        s._step_microbatches([()] * M, [{}] * M, None, None)
        rows.append(st.log)
    return rows


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "tests", "fixtures", "schedules")
    os.makedirs(out, exist_ok=True)
    orders = {
        "1f1b": runtime_1f1b(),
        "interleaved-1f1b": compute_only(S.ScheduleInterleaved1F1B(
            fake_stages(0, [0, P], 2 * P), M).pipeline_order),
        "zbv": compute_only(S.ScheduleZBVZeroBubble(
            fake_stages(0, [0, 2 * P - 1], 2 * P), M).pipeline_order),
        "dualpipev": compute_only(S.ScheduleDualPipeV(
            fake_stages(0, [0, 2 * P - 1], 2 * P), M).pipeline_order),
    }
    for name, rows in orders.items():
        path = os.path.join(out, f"torch_{name}_p{P}_m{M}.csv")
        with open(path, "w") as f:
            for row in rows:
                f.write(",".join(row) + "\n")
        print(f"{path}: {len(rows)} ranks")


if __name__ == "__main__":
    main()
