"""The code fingerprint that keeps a resumed sweep from reusing rows other code computed."""
from __future__ import annotations

from simulator import version
from simulator.sweep import BaseScenario
from simulator.version import code_fingerprint, tree_digest


def test_the_tree_digest_follows_file_contents_and_names_but_not_byte_code(tmp_path):
    (tmp_path / "pkg" / "__pycache__").mkdir(parents=True)
    (tmp_path / "pkg" / "a.py").write_text("x = 1\n")
    before = tree_digest({"simulator": tmp_path / "pkg"})
    (tmp_path / "pkg" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\x00")
    assert tree_digest({"simulator": tmp_path / "pkg"}) == before
    (tmp_path / "pkg" / "a.py").write_text("x = 2\n")
    edited = tree_digest({"simulator": tmp_path / "pkg"})
    assert edited != before
    (tmp_path / "pkg" / "a.py").rename(tmp_path / "pkg" / "b.py")
    assert tree_digest({"simulator": tmp_path / "pkg"}) not in (before, edited)


def test_skipped_prefixes_do_not_count(tmp_path):
    (tmp_path / "builtin").mkdir()
    (tmp_path / "a.py").write_text("x = 1\n")
    before = tree_digest({"simulator": tmp_path}, skip=("simulator/builtin/",))
    (tmp_path / "builtin" / "t.yaml").write_text("a: 1\n")
    assert tree_digest({"simulator": tmp_path}, skip=("simulator/builtin/",)) == before


def test_the_code_fingerprint_is_stable_within_and_across_calls():
    assert code_fingerprint() == code_fingerprint()
    assert len(code_fingerprint()) == 16


def test_a_sweep_base_fingerprint_changes_with_the_code(monkeypatch):
    """A fix that keeps the version recomputes the rows (error rows too) the old code saved."""
    base = BaseScenario(spec=None, topology=None, workload=None, schedule=None, overrides=(), iterations=1, seed=0)
    first = base.fingerprint()
    monkeypatch.setattr(version, "code_fingerprint", lambda: "other-code")
    assert base.fingerprint() != first


def test_a_sweep_base_fingerprint_does_not_depend_on_the_order_of_independent_set_items():
    """Reordering two --set items recomputed every point (a determinism trial); a key repeated, or a
    section and a key under it, keep their order: there it decides the scenario."""
    def fingerprint(*items):
        return BaseScenario(overrides=items, iterations=1).fingerprint()
    a, b = "workload.response_length.sigma=0.9", "topology.scaleup.efficiency=0.7"
    assert fingerprint(a, b) == fingerprint(b, a)
    assert fingerprint("topology.nodes=2", "topology.nodes=4") != fingerprint("topology.nodes=4", "topology.nodes=2")
    section, key = "topology.scaleup={efficiency: 0.7}", "topology.scaleup.efficiency=0.8"
    assert fingerprint(section, key) != fingerprint(key, section)
