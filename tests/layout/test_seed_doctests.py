"""Seed 000 (Tilus register layouts) run verbatim as a doctest, `tilus` renamed to `tilus_tvm`."""
import doctest
import pathlib

import tilus_tvm.ir.layout

SEEDS = pathlib.Path(__file__).resolve().parents[3] / "shared" / "seeds"
SEED_000 = "000_4948a15c49176a2f.txt"


def seed_text(name: str) -> str:
    local_copy = pathlib.Path(__file__).parent / "seeds" / name
    path = local_copy if local_copy.exists() else SEEDS / name
    return path.read_text().replace("tilus.ir.layout", "tilus_tvm.ir.layout")


def run_doctest(text: str, name: str) -> doctest.TestResults:
    # The seed's page runs with the layout module's names in scope (it uses `repeat` unimported).
    globs = {k: v for k, v in vars(tilus_tvm.ir.layout).items() if not k.startswith("_")}
    test = doctest.DocTestParser().get_doctest(text, globs, name, name, 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS * 0)
    runner.run(test)
    return runner.summarize(verbose=False)


def test_seed_000_register_layouts_doctest():
    results = run_doctest(seed_text(SEED_000), SEED_000)
    assert results.attempted >= 10
    assert results.failed == 0


def test_readme_layout_example():
    readme = pathlib.Path(__file__).resolve().parents[2] / "README.md"
    test = doctest.DocTestParser().get_doctest(readme.read_text(), {}, "README.md", "README.md", 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(test)
    results = runner.summarize(verbose=False)
    assert results.attempted >= 2 and results.failed == 0
