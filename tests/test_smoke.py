"""The quick check's verdict (atat.lab.smoke, `make smoke`)."""

from atat.lab import smoke


def _touch_every_kind(root):
    for pattern in smoke.KINDS.values():
        path = root / pattern.replace("**/", "a/b/").replace("*", "x")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")


def test_every_kind_present_passes(tmp_path, capsys):
    _touch_every_kind(tmp_path)
    rows, missing = smoke.check(tmp_path)
    assert not missing and all(n == 1 for _, n, _ in rows)
    assert smoke.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "every kind of output was built" in out and "not in the smoke run" in out


def test_a_missing_kind_fails_naming_it(tmp_path, capsys):
    _touch_every_kind(tmp_path)
    (tmp_path / "results" / "tables" / "claims.csv").unlink()
    assert smoke.main([str(tmp_path)]) == 1
    assert "claims table" in capsys.readouterr().err
