"""Per-job CPU accounting from the jobs' logs (atat.lab.jobstats)."""

import subprocess
import sys
import textwrap
from pathlib import Path

from atat.lab import jobstats

ROOT = Path(__file__).resolve().parents[1]


def test_a_job_logs_its_cpu_time_at_exit_including_children(tmp_path):
    """A process that burns CPU itself and in a child logs both in its exit line."""
    script = textwrap.dedent(f"""
        import subprocess, sys, time
        sys.path.insert(0, {str(ROOT / 'src')!r})
        from atat.base.progress import log_resources_at_exit
        log_resources_at_exit("burn", 1)
        subprocess.run([sys.executable, "-c",
                        "import time\\nt=time.process_time()\\nwhile time.process_time()-t<0.6: pass"])
        t = time.process_time()
        while time.process_time() - t < 0.6:
            pass
    """)
    err = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True).stderr
    m = jobstats.LINE.search(err)
    assert m, err
    assert m["rule"] == "burn" and float(m["cpu"]) >= 1.1 and int(m["threads"]) == 1


def test_collect_sums_per_rule_and_skips_attempt_logs(tmp_path):
    line = "job resources: rule={} cpu_s={} user_s=0.0 sys_s=0.0 wall_s={} max_rss_mb={} threads=1"
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.log").write_text("INFO blah\n" + line.format("train_model", 10.5, 12, 300))
    (tmp_path / "a" / "y.log").write_text(line.format("train_model", 4.5, 5, 500))
    (tmp_path / "a" / "z.log").write_text(line.format("autoattack", 2.0, 3, 100))
    (tmp_path / "a" / "y.attempts.log").write_text(line.format("train_model", 99, 99, 1))
    stats = jobstats.collect(sorted(tmp_path.rglob("*.log")))
    assert stats["train_model"] == {"jobs": 2, "cpu_s": 15.0, "wall_s": 17.0, "max_rss_mb": 500}
    assert stats["autoattack"]["jobs"] == 1
    table = jobstats.format_table(stats)
    assert table.splitlines()[1].startswith("train_model") and "total" in table
    assert jobstats.main([str(tmp_path)]) == 0
    assert jobstats.main([str(tmp_path / "none")]) == 1


def test_the_per_rule_table_as_csv_is_what_the_forecast_reads(tmp_path):
    from atat.lab.forecast import read_measured

    line = "job resources: rule={} cpu_s={} user_s=0.0 sys_s=0.0 wall_s={} max_rss_mb={} threads=1"
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "a.log").write_text(line.format("invert", 30.5, 40, 900))
    (tmp_path / "logs" / "b.log").write_text(line.format("autoattack", 12.5, 13, 800))
    (tmp_path / "logs" / "c.log").write_text(line.format("invert", 10.0, 11, 700))
    out = tmp_path / "jobstats.csv"
    assert jobstats.main([str(tmp_path / "logs"), "--csv", str(out)]) == 0
    assert out.read_text().splitlines()[0] == "rule,jobs,cpu_s,job_wall_s,max_rss_mb"
    assert read_measured(out) == {"invert": (2, 40.5), "autoattack": (1, 12.5)}
