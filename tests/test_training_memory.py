"""Issue 43: the Heads forming page's "Grow one yourself" run reserved 5,008 MiB (of the default 8,192) where it
peaked 3,389 MiB above its baseline: its training steps normalise over 2,000 ids, only its validation pass over the
whole vocabulary. Its reservation (training_jobs.job_nbytes) is checked against the resident memory's measured
growth in a fresh subprocess (tests/rss_growth.py), one wiring and both."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gptviz.serve.training_jobs import induction_growth_spec, job_nbytes

HERE = Path(__file__).resolve().parent
MiB = 2**20


@pytest.mark.slow
@pytest.mark.parametrize("wirings", ["pre", "pre,post"])
def test_the_grow_runs_reservation_is_close_to_its_measured_peak(wirings):
    # One step: every phase of the run (a training step, the validation, a snapshot) happens in the first. The
    # validation once held the batch's logits over the whole vocabulary (3,403 and 3,599 MiB measured, 3,652 and 3,757
    # reserved); in chunks of LOSS_ROWS positions the runs grow 342 and 506 MiB, reserved 522 and 626: within the
    # allowance below, which is looser in ratio than the 1.15x the larger runs met but tighter in MiB (quiet machine).
    out = subprocess.run([sys.executable, str(HERE / "rss_growth.py"), "grow", wirings, "1"], capture_output=True,
                         text=True, timeout=600, check=True)
    growth = int(out.stdout.split()[-1])
    estimate = job_nbytes(induction_growth_spec(tuple(wirings.split(",")), steps=1))
    assert growth <= estimate <= 1.15 * growth + 192 * MiB, (growth / MiB, estimate / MiB)
