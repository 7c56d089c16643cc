"""atat.lab.critical_path on a hand-written Snakemake run log (the format of Snakemake 9's log)."""

from atat.lab import critical_path as cp

LOG = """\
Provided cores: 2
Select jobs to execute...

[Tue Dec  1 10:00:00 2026]
localrule data:
    output: resources/datasets/d
    log: logs/data.log
    jobid: 1
    wildcards: dataset=d
    resources: tmpdir=/tmp
[Tue Dec  1 10:00:10 2026]
Finished jobid: 1 (Rule: data)

[Tue Dec  1 10:00:10 2026]
localrule train:
    input: resources/datasets/d/images.pt
    output: m/a.pt, m/a.json
    jobid: 2
    wildcards: defense=a
[Tue Dec  1 10:00:10 2026]
localrule prior:
    input: resources/datasets/d
    output: g.pt
    jobid: 3
[Tue Dec  1 10:01:10 2026]
Finished jobid: 2 (Rule: train)
[Tue Dec  1 10:03:10 2026]
Finished jobid: 3 (Rule: prior)
[Tue Dec  1 10:03:10 2026]
localrule attack:
    input: m/a.pt, g.pt
    output: inv/a.json
    jobid: 4
    threads: 2
[Tue Dec  1 10:03:40 2026]
Finished jobid: 4 (Rule: attack)
"""


def test_bounds_of_a_small_run():
    run = cp.parse(LOG)
    assert run.cores == 2 and sorted(run.jobs) == [1, 2, 3, 4]
    # the attack reads the model and the prior; the train job reads a file inside the
    # dataset's directory output
    assert cp.dependencies(run.jobs) == {1: set(), 2: {1}, 3: {1}, 4: {2, 3}}
    assert run.jobs[4].threads == 2 and run.jobs[2].label == "train[defense=a]"
    b = cp.bounds(run)
    assert b.wall_s == 220 and b.running_s == 220 and b.invocations == 1
    # data 10 -> prior 180 -> attack 30; the train job (60 s) is off the path
    assert b.critical_path_s == 10 + 180 + 30
    assert [j.rule for j in b.path] == ["data", "prior", "attack"]
    # core-seconds: 10 + 60 + 180 + 2 x 30 = 310 over 2 cores
    assert b.busy_core_s == 310 and b.work_bound_s == 155
    assert b.lower_bound_s == 220 and b.ratio == 1.0
    text = cp.report(b)
    assert "critical path (any cores)" in text and "train" not in text.split("critical path:")[1]


def test_an_unfinished_job_counts_zero_and_a_non_log_is_refused(tmp_path):
    run = cp.parse(LOG.rsplit("[Tue Dec  1 10:03:40 2026]", 1)[0])
    assert run.jobs[4].end is None and run.jobs[4].seconds == 0.0
    bad = tmp_path / "x.log"
    bad.write_text("hello\n")
    assert cp.main([str(bad)]) == 1
    assert cp.main([str(tmp_path / "missing.log")]) == 1


def test_a_stopped_run_and_its_relaunch_in_one_text(tmp_path):
    # the relaunch's jobids start again at 1: they must not overwrite the first run's jobs
    second = """\
Building DAG of jobs...
Provided cores: 2
[Tue Dec  1 10:05:00 2026]
localrule table:
    input: inv/a.json
    output: t.md
    jobid: 1
[Tue Dec  1 10:05:20 2026]
Finished jobid: 1 (Rule: table)
"""
    run = cp.parse("Building DAG of jobs...\n" + LOG + second)
    assert len(run.jobs) == 5
    b = cp.bounds(run)
    assert b.wall_s == 320                      # 10:00:00 -> 10:05:20, the pause included
    # Snakemake ran 10:00:00 -> 10:03:40 and 10:05:00 -> 10:05:20: the ratio leaves the
    # pause out, the report names it
    assert [(a.minute, a.second, z.minute, z.second) for a, z in run.segments] == [
        (0, 0, 3, 40), (5, 0, 5, 20)]
    assert b.running_s == 240 and b.invocations == 2 and b.ratio == 1.0
    assert "(2 invocations, 80 s between them)" in cp.report(b)
    assert "running / max(the two bounds)" in cp.report(b)
    assert [j.rule for j in b.path] == ["data", "prior", "attack", "table"]
    assert b.critical_path_s == 220 + 20
    (tmp_path / "1.log").write_text(LOG)
    (tmp_path / "2.log").write_text(second)
    assert cp.main([str(tmp_path / "1.log"), str(tmp_path / "2.log")]) == 0
