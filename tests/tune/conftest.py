"""Every tuning test gets its own cache directory (and so its own tuning database), and no choice or
tunable library kernel from an earlier test."""
import pytest

from tilus_tvm.tune import decorator, library, records


def forget() -> None:
    decorator._CHOSEN.clear()
    library._TUNABLES.clear()
    records.forget_open_databases()


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TILUS_TVM_CACHE_DIR", str(tmp_path / "cache"))
    forget()
    yield tmp_path / "cache"
    forget()
