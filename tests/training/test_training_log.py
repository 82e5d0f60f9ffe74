import re
from pathlib import Path

import pytest

from gptviz.model.weights import bundled_models
from gptviz.training import training_log

LOG = """# stage 1: copy-only (3 steps)
some header line
step     1/3 loss 7.6 val 10.8 prev 0.03 ind 0.01 rep 10.8 lr 1.00e-05 |g| 0.97 eta 1m00s
step     3/3 loss 7.0 val 10.0 prev 0.40 ind 0.50 rep 5.0 lr 1.00e-03 |g| 0.5 eta 0m00s
saved /tmp/x (final: {'step': 3})

# stage 2: text (4 steps)
step     1/4 loss 8.0 val 9.0 prev 0.45 ind 0.90 rep 1.0 lr 1.00e-05 |g| 5.1 eta 1m00s
step     2/4 loss 6.0 lr 1.00e-04 |g| 1.0 eta 0m30s
step     4/4 loss 5.5 val 5.0 prev 0.95 ind 0.95 rep 0.1 lr 1.00e-04 |g| 1.0 eta 0m00s
"""


def test_small_log():
    stages = training_log.parse_train_log(LOG)
    assert [(s.number, s.start, s.end) for s in stages] == [(1, 0, 3), (2, 3, 7)]
    assert [r["step"] for s in stages for r in s.records] == [1, 3, 4, 5, 7]
    assert stages[1].records[1] == {
        "stage_step": 2,
        "stage_steps": 4,
        "train_loss": 6.0,
        "lr": 1e-4,
        "grad_norm": 1.0,
        "step": 5,
    }
    assert training_log.first_crossing(stages, "induction", 0.5) == 3
    assert training_log.first_crossing(stages, "prev_token", 0.9) == 7
    assert training_log.first_crossing(stages, "prev_token", 0.99) is None
    with pytest.raises(ValueError):
        training_log.parse_train_log("# stage 1: nothing\n")


@pytest.mark.parametrize("name", ["shakespeare-pre", "shakespeare-post"])
def test_bundled_logs_match_their_lines(name):
    folder = bundled_models()[name]
    text = (Path(folder) / "train.log").read_text()
    lines = [line for line in text.splitlines() if line.startswith("step")]
    stages = training_log.read_train_log(folder)
    records = [r for s in stages for r in s.records]
    assert len(records) == len(lines)
    for r, line in zip(records, lines, strict=True):
        m = re.match(r"step\s+(\d+)/\d+ loss (\S+)", line)
        assert (r["stage_step"], r["train_loss"]) == (int(m[1]), float(m[2]))
    # four stages: 1,000 + 2,600 + 800 + 600 steps, boundaries at the cumulative sums
    assert [s.steps for s in stages] == [1000, 2600, 800, 600]
    assert [s.start for s in stages] == [0, 1000, 3600, 4400]
    assert records[-1]["step"] == 5000
    last = lines[-1].split()
    assert records[-1]["val_loss"] == float(last[last.index("val") + 1])
