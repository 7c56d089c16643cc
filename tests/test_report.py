"""The Snakemake HTML report (one file with every table and figure that exists) and
targeted rebuilds: `snakemake -n results/tables/table11.md` plans only what Table 11 needs."""

from __future__ import annotations

import base64
import html
import io
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

# the workflow test's tiny config: NoDef + AT-AT, 2 epochs, 2 epsilons (Tables 11, 14), inversion
from test_workflow import TINY  # noqa: E402

REPORTED = {"results/tables/table4.csv", "results/tables/table11.csv",
            "results/tables/table14.csv", "results/figures/robust_accuracy_vs_eps.png"}
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu",
                  "--disable-background-networking", "--disable-component-update",
                  "--no-first-run"]


def snakemake(workdir: Path, *args: str, timeout: int = 3600) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory",
           str(workdir), "--configfile", str(ROOT / "config" / "demo.yaml"),
           str(workdir / "tiny.yaml"), "--cores", "2", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def planned_jobs(output: str) -> dict[str, int]:
    """Rule -> count from the 'Job stats' table of a dry run."""
    jobs: dict[str, int] = {}
    block = output.split("Job stats:", 1)[-1].split("total", 1)[0]
    for line in block.splitlines():
        m = re.match(r"^(\w+)\s+(\d+)$", line.strip())
        if m:
            jobs[m.group(1)] = int(m.group(2))
    return jobs


def report_json(report: str, name: str) -> dict:
    m = re.search(r"var %s = (\{)" % name, report)
    assert m, f"report has no '{name}' object"
    return json.JSONDecoder().raw_decode(report[m.start(1):])[0]


def decode_data_uri(uri: str) -> bytes:
    head, data = uri.split(",", 1)
    assert head.startswith("data:") and head.endswith(";base64"), head[:80]
    return base64.b64decode(data)


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def dump_dom(url: str, profile: Path) -> str:
    proc = subprocess.run([chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
                           "--virtual-time-budget=15000", "--dump-dom", url],
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.mark.slow
def test_targeted_rebuild_plans_only_table11(tmp_path):
    """Fresh directory: Table 11 needs data, models, AutoAttack and its own summary of those
    records (results/summaries/table11.csv) -- no inversion, no other table, figure or
    `all` (issue 43: before, the grid's summary.csv also planned every attack)."""
    (tmp_path / "tiny.yaml").write_text(TINY)
    proc = snakemake(tmp_path, "-n", "results/tables/table11.md", timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    jobs = planned_jobs(proc.stdout + proc.stderr)
    assert jobs.get("table11") == 1  # the rule of Table 11 (one rule per table)
    # the pretraining stage feeds train_model (the tiny grid's one pretrained backbone)
    assert set(jobs) <= {"synthfaces", "pretraining_population", "pretrain_backbone",
                         "train_model", "autoattack", "output_summary", "table11"}, jobs
    # 2 models at eps 0.031, in one job per model (the demo's autoattack.job per_model)
    assert jobs.get("autoattack") == 2
    assert jobs.get("output_summary") == 1
    # an epsilon that is not configured has no table rule
    proc = snakemake(tmp_path, "-n", "results/tables/table12.md", timeout=600)
    assert proc.returncode != 0
    assert "MissingRuleException" in proc.stdout + proc.stderr or \
        "No rule to produce" in proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    work = tmp_path_factory.mktemp("report")
    (work / "tiny.yaml").write_text(TINY)
    proc = snakemake(work, "all")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    proc = snakemake(work, "--report", "results/report.html", timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return work


@pytest.mark.slow
def test_report_holds_every_existing_table_and_figure(tiny_run):
    report = (tiny_run / "results" / "report.html").read_text()
    results = report_json(report, "results")
    assert REPORTED <= set(results)
    # every table (CSV) and figure the run produced is in the report
    existing = {str(p.relative_to(tiny_run)) for p in
                [*(tiny_run / "results" / "tables").glob("*.csv"),
                 *(tiny_run / "results" / "figures").glob("*.png")]}
    assert existing <= set(results), existing - set(results)
    for path, entry in results.items():
        data = decode_data_uri(entry["data_uri"])
        on_disk = (tiny_run / path).read_bytes()
        assert data == on_disk, path
        assert "{{" not in entry["caption"] and entry["caption"].strip(), path
    assert "Table 11" in results["results/tables/table11.csv"]["caption"]
    assert "1e-05" in results["results/tables/table14.csv"]["caption"]
    cats = report_json(report, "categories")
    assert {"Tables", "Figures"} <= set(cats)
    assert "AT-AT reproduction workflow" in report
    # a targeted rebuild after the run: only the deleted table is planned
    (tiny_run / "results" / "tables" / "table11.md").unlink()
    proc = snakemake(tiny_run, "-n", "results/tables/table11.md", timeout=600)
    assert planned_jobs(proc.stdout + proc.stderr) == {"table11": 1}
    proc = snakemake(tiny_run, "results/tables/table11.md", timeout=600)
    assert proc.returncode == 0 and (tiny_run / "results" / "tables" / "table11.md").exists()


@pytest.mark.slow
def test_report_renders_in_chromium(tiny_run, tmp_path):
    if chromium() is None:
        pytest.skip("chromium is not installed (Debian: apt-get install chromium)")
    report_path = tiny_run / "results" / "report.html"
    dom = dump_dom(report_path.as_uri(), tmp_path / "profile")
    text = html.unescape(re.sub(r"<[^>]+>", " ", re.sub(r"<script.*?</script>", "", dom,
                                                         flags=re.S)))
    # the React app ran: the workflow description and both categories are in the DOM
    assert "AT-AT reproduction workflow" in text
    assert "Tables" in text and "Figures" in text
    # every figure of the report decodes to a non-empty image in Chromium
    results = report_json(report_path.read_text(), "results")
    figures = {p: e["data_uri"] for p, e in results.items() if e["mime_type"].startswith("image/")}
    assert figures
    imgs = "\n".join(f'<img id="f{i}" src="{uri}">' for i, uri in enumerate(figures.values()))
    page = tmp_path / "figures.html"
    page.write_text(
        f"<html><body>{imgs}<pre id='out'></pre><script>"
        "window.addEventListener('load', () => {"
        "  const r = [...document.images].map(i => i.id + ':' + i.naturalWidth + 'x' + "
        "i.naturalHeight + ':' + i.complete);"
        "  document.getElementById('out').textContent = 'SIZES ' + r.join(' ');});"
        "</script></body></html>")
    dom = dump_dom(page.as_uri(), tmp_path / "profile2")
    m = re.search(r"SIZES ([^<]*)", dom)
    assert m, dom[-2000:]
    sizes = m.group(1).split()
    assert len(sizes) == len(figures)
    for s in sizes:
        _, wh, complete = s.split(":")
        w, h = map(int, wh.split("x"))
        assert w > 100 and h > 100 and complete == "true", s
    # and the pixels are not blank
    import matplotlib.image as mpimg

    for uri in figures.values():
        img = mpimg.imread(io.BytesIO(decode_data_uri(uri)), format="png")
        assert img[..., :3].std() > 0.02
