"""The demo notebook's conventions and the page's copy (no servers). What the panes show, on two real cpu-tiny
servers: tests/engine/test_server_pair.py; the page in a real browser: tests/engine/test_demo_browser.py."""

from __future__ import annotations


def test_demo_notebook_follows_the_conventions_and_defaults_to_the_default_profile():
    import nbformat
    import papermill

    from tools.demo_page import DEMO_NOTEBOOK
    from tools.profiles import load_profile

    nb = nbformat.read(DEMO_NOTEBOOK, as_version=4)
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1
    assert not any(c.get("outputs") for c in nb.cells if c.cell_type == "code")
    assert "../docs/glossary.md" in nb.cells[0].source
    assert "pair.stop()" not in "".join(c.source for c in nb.cells if c.cell_type == "code"), \
        "a stop cell would stop the servers as soon as Voila has run the page"
    declared = papermill.inspect_notebook(str(DEMO_NOTEBOOK))
    profile = load_profile("cpu-coder")
    for name, spec in declared.items():
        if name in profile:
            assert eval(spec["default"]) == profile[name], f"{name}: {spec['default']} vs cpu-coder's {profile[name]}"


def test_page_copy_gets_the_profile_parameters(tmp_path):
    import nbformat

    from tools import demo_page

    path = demo_page.prepare("cpu-tiny", smoke=True, run_dir=tmp_path / "demo")
    nb = nbformat.read(path, as_version=4)
    injected = [c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert len(injected) == 1 and 'target_model = "smollm2-135m-instruct"' in injected[0].source
    assert f'run_dir = "{tmp_path / "demo"}"' in injected[0].source
    cmd = demo_page.voila_command(path, 8999)
    assert "--Voila.ip=127.0.0.1" in cmd and "--port=8999" in cmd and "--Voila.port_retries=0" in cmd
