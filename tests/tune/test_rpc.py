"""tracker="host:port:key": an RPCRunner with one worker per server the tracker has for the key (CPU:
the tracker and servers start without a GPU; the GPU test times candidates through them)."""
import pytest

from tilus_tvm.tune import TuningError, measure

from tests.tune.rpc import local_tracker


@pytest.mark.slow
def test_tracker_runner_has_a_worker_per_registered_server(monkeypatch):
    from tvm.s_tir import meta_schedule as ms

    made = []
    monkeypatch.setattr(ms.runner, "RPCRunner", lambda **kwargs: made.append(kwargs) or kwargs)
    with local_tracker(servers=2) as address:
        host, port, key = measure.parse_tracker(address)
        measure.tracker_runner(address)
        (kwargs,) = made
        assert kwargs["max_workers"] == 2
        config = kwargs["rpc_config"]
        assert (config.tracker_host, config.tracker_port, config.tracker_key) == (host, port, key)
        with pytest.raises(ValueError, match="Unable to find servers with the specific key"):
            measure.tracker_runner(f"{host}:{port}:no-such-key")


@pytest.mark.parametrize("text", ["127.0.0.1:9190", "127.0.0.1:port:key", ":9190:key", "127.0.0.1:9190:", 9190])
def test_tracker_address_must_be_host_port_key(text):
    with pytest.raises(TuningError, match="tracker must be 'host:port:key'"):
        measure.parse_tracker(text)
