"""The JSON API client: versions, yanked and pre-releases, and errors that name the package."""

from __future__ import annotations

import pytest
from packaging.version import Version

from hyperloom_assets.resources.hosts.preflight import allocate_port
from hyperloom_assets.resources.releases.package_index import (
    PackageIndex,
    PackageIndexError,
    parse_releases,
    simple_index_url,
)
from tests.sensors.sim_wheel import build_sim_wheel


def test_parse_releases_keeps_final_installable_versions() -> None:
    payload = {"info": {"version": "0.10.0"}, "releases": {
        "0.9.0": [{"yanked": False}], "0.10.0": [{"yanked": False}], "0.11.0rc1": [{"yanked": False}],
        "0.10.1": [{"yanked": True}], "0.8.0": [], "not-a-version!": [{"yanked": False}]}}
    releases = parse_releases("vllm", payload)
    assert releases.versions == [Version("0.9.0"), Version("0.10.0")]
    assert releases.newest == Version("0.10.0")
    assert releases.unparseable == ["not-a-version!"]


def test_parse_releases_falls_back_to_info_version_and_rejects_other_shapes() -> None:
    assert parse_releases("atom", {"info": {"version": "1.2.3"}}).newest == Version("1.2.3")
    with pytest.raises(PackageIndexError, match="atom.*neither"):
        parse_releases("atom", {"info": {}})
    with pytest.raises(PackageIndexError, match="expected a JSON object"):
        parse_releases("atom", ["1.0"])


def test_simple_url_follows_the_json_base(monkeypatch) -> None:
    monkeypatch.delenv("HYPERLOOM_PACKAGE_SIMPLE_URL", raising=False)
    monkeypatch.setenv("HYPERLOOM_PACKAGE_INDEX_URL", "http://127.0.0.1:9/pypi/")
    assert simple_index_url() == "http://127.0.0.1:9/simple"
    monkeypatch.delenv("HYPERLOOM_PACKAGE_INDEX_URL")
    assert simple_index_url() == "https://pypi.org/simple"
    monkeypatch.setenv("HYPERLOOM_PACKAGE_SIMPLE_URL", "http://mirror/simple/")
    assert simple_index_url() == "http://mirror/simple"


def test_live_index_versions_and_errors(index, tmp_path) -> None:
    index.publish("hyperloom-sim-engine", "0.1.0", build_sim_wheel(tmp_path / "w1", "0.1.0"))
    index.publish("hyperloom-sim-engine", "0.2.0", build_sim_wheel(tmp_path / "w2", "0.2.0"))
    client = PackageIndex()
    assert client.releases("hyperloom-sim-engine").newest == Version("0.2.0")

    with pytest.raises(PackageIndexError, match=r"no-such-engine: .*/pypi/no-such-engine/json: HTTP 404"):
        client.releases("no-such-engine")
    index.answer_raw("sglang", 200, b"<html>not json</html>")
    with pytest.raises(PackageIndexError, match="sglang: .*not JSON"):
        client.releases("sglang")


def test_unreachable_index_names_the_url() -> None:
    port = allocate_port()
    client = PackageIndex(base_url=f"http://127.0.0.1:{port}/pypi", timeout_s=2)
    with pytest.raises(PackageIndexError, match=rf"vllm: http://127.0.0.1:{port}/pypi/vllm/json: unreachable"):
        client.releases("vllm")
