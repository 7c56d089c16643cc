"""atat.base.progress: one complete line per step, with count, percentage, elapsed time and ETA."""

import logging

from atat.base.progress import Progress, format_seconds, track


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_one_line_per_step_with_eta_from_the_steps_run_here():
    clock, lines = Clock(), []
    prog = Progress(10, "m epoch", done=4, log=lines.append, clock=clock)  # resumed at 4
    clock.t += 30
    assert prog.step(loss=0.123456) == "m epoch 5/10 (50%) loss=0.1235 | 0:00:30 elapsed, ETA 0:02:30"
    clock.t += 30
    prog.step()
    assert lines == ["m epoch 5/10 (50%) loss=0.1235 | 0:00:30 elapsed, ETA 0:02:30",
                     "m epoch 6/10 (60%) | 0:01:00 elapsed, ETA 0:02:00"]
    assert format_seconds(3 * 3600 + 61) == "3:01:01"


def test_disabled_progress_counts_without_writing():
    lines = []
    prog = Progress(3, "x", log=lines.append, enabled=False)
    assert prog.step().startswith("x 1/3 (33%)") and lines == []


def test_track_logs_a_line_after_each_item_and_never_a_carriage_return(caplog):
    log = logging.getLogger("atat.test_progress")
    with caplog.at_level("INFO", logger="atat.test_progress"):
        assert list(track(range(3), "PPA batches", log=log)) == [0, 1, 2]
    msgs = [r.getMessage() for r in caplog.records]
    assert [m.split(" |")[0] for m in msgs] == ["PPA batches 1/3 (33%)", "PPA batches 2/3 (67%)",
                                               "PPA batches 3/3 (100%)"]
    assert all("ETA" in m and "\r" not in m and "\n" not in m for m in msgs)


def test_resumed_steps_count_but_do_not_speed_up_the_eta():
    clock, lines = Clock(), []
    prog = Progress(4, "classes done", log=lines.append, clock=clock)
    prog.skip(2)  # loaded from resume files in no time
    clock.t += 10
    assert prog.step() == "classes done 3/4 (75%) | 0:00:10 elapsed, ETA 0:00:10"
