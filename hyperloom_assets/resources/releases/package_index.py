"""A package index's JSON API (`{base}/{package}/json`, PyPI's shape): the released versions.

The base comes from `HYPERLOOM_PACKAGE_INDEX_URL` (default `https://pypi.org/pypi`); the
matching PEP 503 simple index (what pip installs from) is `HYPERLOOM_PACKAGE_SIMPLE_URL`,
else the base with its trailing `/pypi` replaced by `/simple`. Every failure is a
PackageIndexError naming the package, the URL and what went wrong.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from dataclasses import dataclass

import dagster as dg
from packaging.version import InvalidVersion, Version

from hyperloom_assets.core.secrets import mask_urls

DEFAULT_INDEX_URL = "https://pypi.org/pypi"
INDEX_URL_ENV = "HYPERLOOM_PACKAGE_INDEX_URL"
SIMPLE_URL_ENV = "HYPERLOOM_PACKAGE_SIMPLE_URL"
MAX_RESPONSE_BYTES = 64 * 1024 * 1024


def index_url() -> str:
    return (os.environ.get(INDEX_URL_ENV) or DEFAULT_INDEX_URL).rstrip("/")


def simple_index_url(base: str | None = None) -> str:
    """The PEP 503 index pip uses, consistent with the JSON API base."""
    if base is None:
        explicit = os.environ.get(SIMPLE_URL_ENV)
        if explicit:
            return explicit.rstrip("/")
        base = index_url()
    base = base.rstrip("/")
    return base.removesuffix("/pypi") + "/simple"


class PackageIndexError(RuntimeError):
    def __init__(self, package: str, url: str, reason: str, status: int | None = None):
        self.package, self.url, self.reason, self.status = package, url, reason, status
        # An index URL may carry credentials (https://user:token@host/...): the message shows none.
        super().__init__(f"package index: {package}: {mask_urls(url)}: {mask_urls(reason)}")


@dataclass(frozen=True)
class Releases:
    package: str
    versions: list[Version]  # final, non-yanked releases with files, ascending
    unparseable: list[str]  # version strings the index listed that do not parse

    @property
    def newest(self) -> Version | None:
        return self.versions[-1] if self.versions else None


def _release_is_live(files: object) -> bool:
    # A release whose every file is yanked (or that has no file) cannot be installed.
    if not isinstance(files, list) or not files:
        return False
    return any(isinstance(item, dict) and not item.get("yanked", False) for item in files)


def parse_releases(package: str, payload: object, url: str = "") -> Releases:
    """The installable final releases in a JSON API answer; pre-releases are left out."""
    if not isinstance(payload, dict):
        raise PackageIndexError(package, url, f"expected a JSON object, got {type(payload).__name__}")
    releases = payload.get("releases")
    if not isinstance(releases, dict):
        info = payload.get("info")
        latest = info.get("version") if isinstance(info, dict) else None
        if not isinstance(latest, str):
            raise PackageIndexError(package, url, "the answer has neither `releases` nor `info.version`")
        releases = {latest: [{"yanked": False}]}
    versions, unparseable = [], []
    for text, files in releases.items():
        try:
            version = Version(text)
        except InvalidVersion:
            unparseable.append(text)
            continue
        if not version.is_prerelease and _release_is_live(files):
            versions.append(version)
    return Releases(package=package, versions=sorted(versions), unparseable=unparseable)


class PackageIndex(dg.ConfigurableResource):
    """`base_url`: the JSON API root (default: `HYPERLOOM_PACKAGE_INDEX_URL` or PyPI)."""

    base_url: str | None = None
    timeout_s: float = 15.0

    def base(self) -> str:
        return (self.base_url or index_url()).rstrip("/")

    def simple_url(self) -> str:
        return simple_index_url(self.base_url)

    def releases(self, package: str) -> Releases:
        url = f"{self.base()}/{package}/json"
        request = urllib.request.Request(url, headers={"Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                body = response.read(MAX_RESPONSE_BYTES + 1)
        except urllib.error.HTTPError as exc:
            raise PackageIndexError(package, url, f"HTTP {exc.code} {exc.reason}", status=exc.code) from exc
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            raise PackageIndexError(package, url, f"unreachable: {reason}") from exc
        if len(body) > MAX_RESPONSE_BYTES:
            raise PackageIndexError(package, url, f"answer larger than {MAX_RESPONSE_BYTES} bytes")
        try:
            payload = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise PackageIndexError(package, url, f"not JSON: {exc}") from exc
        return parse_releases(package, payload, url)
