"""Every tuning test gets its own cache directory (and so its own tuning database)."""
import pytest

from tilus_tvm.tune import decorator, records


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TILUS_TVM_CACHE_DIR", str(tmp_path / "cache"))
    decorator._CHOSEN.clear()
    records.forget_open_databases()
    yield tmp_path / "cache"
    decorator._CHOSEN.clear()
    records.forget_open_databases()
