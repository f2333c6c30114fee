"""The provider's own transport through an HTTP proxy: proxy.py (another project's proxy
server, on loopback) forwards plain requests and tunnels HTTPS ones with CONNECT."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from llmguard_sdk import ChatRequest, OpenAICompatibleProvider
from llmguard_sdk.errors import ProviderError, ProviderUnavailableError
from llmguard_sdk.providers._http11 import StdlibTransport, environment_proxy
from llmguard_sdk.providers._requests import own_transport
from llmguard_sdk.testing import FakeProvider
from tests.peers import stop_process
from tests.test_http11 import BODY
from tests.tlsserver import serve_tls

pytest.importorskip("proxy")  # proxy.py, in the dev extra

_PROXY_NAMES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No proxy settings from the machine's environment."""
    for name in _PROXY_NAMES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    monkeypatch.delenv("REQUEST_METHOD", raising=False)  # urllib drops HTTP_PROXY under CGI
    return monkeypatch


@pytest.fixture(scope="module")
def proxy_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """proxy.py on loopback, asking for Basic credentials ``user:secret``."""
    port_file = tmp_path_factory.mktemp("proxy") / "port"
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "proxy", "--hostname", "127.0.0.1", "--port", "0"),
            *("--port-file", str(port_file), "--num-workers", "1"),
            *("--basic-auth", "user:secret", "--log-level", "ERROR"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while not (port_file.exists() and port_file.read_text().strip()):
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail("proxy.py did not start")
            time.sleep(0.05)
        yield int(port_file.read_text().split()[0])
    finally:
        stop_process(process)


def ask(provider: OpenAICompatibleProvider) -> str | None:
    request = ChatRequest.model_validate({"messages": [{"role": "user", "content": "hi"}]})
    return provider.complete(request, model="m", deadline=time.monotonic() + 10).text


def _transport(provider: OpenAICompatibleProvider) -> StdlibTransport:
    transport = provider._sync_pool().transport
    assert isinstance(transport, StdlibTransport)
    return transport


def test_plain_http_goes_through_the_proxy_with_its_credentials(
    clean_env: pytest.MonkeyPatch, proxy_port: int
) -> None:
    with FakeProvider() as fake:
        clean_env.setenv("HTTP_PROXY", f"http://user:secret@127.0.0.1:{proxy_port}")
        provider = OpenAICompatibleProvider(fake.base_url)
        assert _transport(provider)._proxy is not None
        assert ask(provider)
        assert ask(provider)
        assert len(fake.requests) == 2
        provider.close()
        clean_env.setenv("HTTP_PROXY", f"http://user:wrong@127.0.0.1:{proxy_port}")
        refused = OpenAICompatibleProvider(fake.base_url)
        with pytest.raises(ProviderError) as caught:  # the proxy's own 407
            ask(refused)
        assert caught.value.status_code == 407
        assert len(fake.requests) == 2  # it never reached the server
        refused.close()


def test_https_is_tunnelled_and_the_servers_certificate_checked(
    clean_env: pytest.MonkeyPatch, proxy_port: int, tmp_path: Path
) -> None:
    with serve_tls(tmp_path, BODY) as (base_url, cert_file):
        clean_env.setenv("HTTPS_PROXY", f"http://user:secret@127.0.0.1:{proxy_port}")
        clean_env.delenv("SSL_CERT_DIR", raising=False)
        clean_env.setenv("SSL_CERT_FILE", str(cert_file))  # trust the server's certificate
        provider = OpenAICompatibleProvider(base_url)
        assert ask(provider) == "hi there"
        assert ask(provider) == "hi there"
        assert _transport(provider)._open == 1  # one tunnel, kept for the second call
        provider.close()
        clean_env.setenv("HTTPS_PROXY", f"http://user:wrong@127.0.0.1:{proxy_port}")
        refused = OpenAICompatibleProvider(base_url)
        with pytest.raises(ProviderUnavailableError) as caught:  # CONNECT answered 407
            ask(refused)
        assert caught.value.request_sent is False  # safe to send again
        assert isinstance(caught.value.__cause__, httpx.ProxyError)
        refused.close()
        clean_env.setenv("HTTPS_PROXY", f"http://user:secret@127.0.0.1:{proxy_port}")
        clean_env.delenv("SSL_CERT_FILE")  # certifi's roots: the server's name is not trusted
        untrusting = OpenAICompatibleProvider(base_url)
        with pytest.raises(ProviderUnavailableError) as unverified:
            ask(untrusting)
        assert "CERTIFICATE_VERIFY_FAILED" in str(unverified.value.__cause__)
        untrusting.close()


@pytest.mark.parametrize(
    ("environment", "url", "expected"),
    [
        ({"HTTPS_PROXY": "http://p:1"}, "https://api.ex.test/v1", "http://p:1"),
        ({"HTTPS_PROXY": "http://p:1"}, "http://api.ex.test/v1", None),
        ({"HTTP_PROXY": "p:2"}, "http://api.ex.test/v1", "http://p:2"),  # scheme added
        ({"ALL_PROXY": "http://p:3"}, "https://api.ex.test/v1", "http://p:3"),
        ({"ALL_PROXY": "http://p:3", "HTTPS_PROXY": "http://p:1"}, "https://a.io", "http://p:1"),
        ({"HTTPS_PROXY": "http://p:1", "NO_PROXY": "ex.test"}, "https://api.ex.test", None),
        ({"HTTPS_PROXY": "http://p:1", "NO_PROXY": "ex.test"}, "https://ex.test", None),
        ({"HTTPS_PROXY": "http://p:1", "NO_PROXY": "ex.test"}, "https://badex.test", "http://p:1"),
        ({"HTTPS_PROXY": "http://p:1", "NO_PROXY": ".ex.test"}, "https://ex.test", "http://p:1"),
        ({"HTTPS_PROXY": "http://p:1", "NO_PROXY": ".ex.test"}, "https://a.ex.test", None),
        ({"HTTPS_PROXY": "http://p:1", "NO_PROXY": "*"}, "https://api.ex.test", None),
        ({"ALL_PROXY": "http://p:1", "NO_PROXY": "127.0.0.2, localhost"}, "http://127.0.0.2", None),
        ({"HTTPS_PROXY": "http://p:1", "NO_PROXY": "localhost"}, "https://localhost:8443", None),
    ],
)  # fmt: skip
def test_the_environment_names_proxies_as_httpx_reads_it(
    clean_env: pytest.MonkeyPatch, environment: dict[str, str], url: str, expected: str | None
) -> None:
    for name, value in environment.items():
        clean_env.setenv(name, value)
    proxy = environment_proxy(httpx.URL(url))
    assert (None if proxy is None else str(proxy.url)) == expected
    # httpx's own client decides the same: its transport for the URL has that proxy or none
    client = httpx.Client()
    chosen = client._transport_for_url(httpx.URL(url))
    assert (chosen is not client._transport) == (expected is not None)
    client.close()


def test_https_and_socks_proxies_stay_with_httpxs_client(clean_env: pytest.MonkeyPatch) -> None:
    limits = httpx.Limits()
    url = "https://api.ex.test/v1"
    clean_env.setenv("HTTPS_PROXY", "https://p:1")
    assert own_transport(httpx, limits, asynchronous=False, url=url) is None
    clean_env.setenv("HTTPS_PROXY", "socks5://p:1")
    assert own_transport(httpx, limits, asynchronous=False, url=url) is None
    clean_env.setenv("HTTPS_PROXY", "http://user:pw@p:1")
    transport = own_transport(httpx, limits, asynchronous=False, url=url)
    assert isinstance(transport, StdlibTransport)
    assert transport._proxy_headers == {"Proxy-Authorization": "Basic dXNlcjpwdw=="}
    with pytest.raises(ValueError, match="http:// proxies only"):
        StdlibTransport(proxy=httpx.Proxy("https://p:1"))
