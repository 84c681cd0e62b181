"""Who may connect: site keys, tokens, the origin allowlist, `/token`, and the session caps at `/ws`."""

from __future__ import annotations

import dataclasses
import json
import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute
from starlette.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from voxline.config import Settings
from voxline.errors import OriginNotAllowed, TooManySessions, Unauthenticated, Unauthorized, VoxlineError
from voxline.server import protocol as p
from voxline.server.admission import Gate, Peer
from voxline.server.auth import (
    MAX_TOKEN_TTL_S,
    SiteKey,
    load_site_keys,
    mint_token,
    new_secret,
    normalize_origin,
    parse_site_keys,
    token_expiry,
    verify_token,
)
from voxline.server.engines import Engines
from voxline.server.token_endpoint import token_routes
from voxline.server.ws import websocket_endpoint

SMOLLM = "smollm2-135m-instruct-ct2"
SHOP = "https://shop.example"
BLOG = "https://blog.example"
EVIL = "https://evil.example"
SHOP_SECRET = "shop-secret-0123456789abcdef"
BLOG_SECRET = "blog-secret-0123456789abcdef"
KEYS_JSON = json.dumps([
    {"id": "shop", "secret": SHOP_SECRET, "origins": [SHOP], "tier": 1, "public": True},
    {"id": "blog", "secret": BLOG_SECRET, "origins": [BLOG], "max_sessions": 1},
])
KEYS = parse_site_keys(KEYS_JSON)
NOW = 1_700_000_000.0


# ---------------------------------------------------------------------------------------------- tokens


def test_a_token_verifies_for_the_origin_it_was_minted_for():
    token = mint_token(KEYS["shop"], SHOP, ttl_s=300, now=NOW)
    assert token.startswith("v1.shop.") and token.count(".") == 4
    assert token_expiry(token) == int(NOW + 300)
    assert verify_token(KEYS, token, SHOP, now=NOW + 299) is KEYS["shop"]


def test_an_expired_token_is_unauthenticated():
    token = mint_token(KEYS["shop"], SHOP, ttl_s=300, now=NOW)
    with pytest.raises(Unauthenticated, match="expired"):
        verify_token(KEYS, token, SHOP, now=NOW + 301)


def test_a_token_of_one_origin_is_refused_on_another_origin_of_the_same_key():
    two = {"shop": dataclasses.replace(KEYS["shop"], origins=frozenset({SHOP, "https://www.shop.example"}))}
    token = mint_token(two["shop"], SHOP, now=NOW)
    with pytest.raises(Unauthenticated, match="signature"):
        verify_token(two, token, "https://www.shop.example", now=NOW)


def test_a_token_used_from_an_origin_its_key_does_not_list_is_origin_not_allowed():
    token = mint_token(KEYS["shop"], SHOP, now=NOW)
    with pytest.raises(OriginNotAllowed, match="evil.example"):
        verify_token(KEYS, token, EVIL, now=NOW)


def test_a_token_without_origin_serves_clients_without_one_and_no_page():
    token = mint_token(KEYS["shop"], None, now=NOW)
    assert verify_token(KEYS, token, None, now=NOW) is KEYS["shop"]
    with pytest.raises(Unauthenticated):
        verify_token(KEYS, token, SHOP, now=NOW)


def test_a_token_signed_with_another_secret_or_altered_is_unauthenticated():
    forged = mint_token(dataclasses.replace(KEYS["shop"], secret="not-the-secret-at-all"), SHOP, now=NOW)
    with pytest.raises(Unauthenticated, match="signature"):
        verify_token(KEYS, forged, SHOP, now=NOW)
    version, key, expiry, nonce, signature = mint_token(KEYS["shop"], SHOP, now=NOW).split(".")
    longer = ".".join([version, key, str(int(expiry) + 3600), nonce, signature])
    with pytest.raises(Unauthenticated, match="signature"):
        verify_token(KEYS, longer, SHOP, now=NOW)


@pytest.mark.parametrize("token", ["", "v1", "v2.shop.1700000300.abc.def", "v1.shop.soon.abc.def",
                                   "v1.shop.1700000300..def", "v1.sh.op.1700000300.abc.def",
                                   "v1.sh p.1700000300.abc.def", "v1.shop.1700000300.abc." + "x" * 300])
def test_malformed_tokens_are_unauthenticated(token):
    with pytest.raises(Unauthenticated, match="malformed"):
        verify_token(KEYS, token, SHOP, now=NOW)


@pytest.mark.parametrize("expiry", ["²³", "١٧٠٠٠٠٠٣٠٠", "1_700_000_300", "+1700000300", " 1700000300", "1" * 13])
def test_an_expiry_that_is_not_ascii_digits_is_malformed_not_a_crash(expiry):
    with pytest.raises(Unauthenticated, match="malformed"):
        verify_token(KEYS, f"v1.shop.{expiry}.abc.def", SHOP, now=NOW)
    with pytest.raises(Unauthenticated, match="malformed"):
        token_expiry(f"v1.shop.{expiry}.abc.def")


@settings(max_examples=300, derandomize=True, database=None, deadline=None)
@given(st.one_of(
    st.text(max_size=300),
    st.builds(lambda parts: ".".join(parts), st.lists(st.text(st.characters(exclude_categories=["Cs"]), max_size=20),
                                                       min_size=5, max_size=5)),
    st.builds(lambda key, expiry, nonce, sig: f"v1.{key}.{expiry}.{nonce}.{sig}",
              st.sampled_from(["shop", "blog", "gone", "", "s.hop"]),
              st.one_of(st.integers(-(2**70), 2**70).map(str), st.text(max_size=14)),
              st.text(max_size=16), st.text(max_size=50)),
), st.sampled_from([SHOP, BLOG, EVIL, None, "null", "https://ünicode.example"]))
def test_token_parsing_raises_only_its_two_errors(token, origin):
    try:
        key = verify_token(KEYS, token, origin, now=NOW)
    except (Unauthenticated, OriginNotAllowed) as exc:
        assert exc.message and token not in exc.message or len(token) < 8
    else:
        assert key in KEYS.values()  # only a real signature gets here, which random text never is
        raise AssertionError(f"{token!r} verified")


def test_a_token_of_an_unknown_key_is_unauthenticated():
    token = mint_token(SiteKey("gone", "gone-secret-0123456789", frozenset({SHOP})), SHOP, now=NOW)
    with pytest.raises(Unauthenticated, match="'gone'"):
        verify_token(KEYS, token, SHOP, now=NOW)


def test_tokens_live_at_most_a_day_whoever_signed_them():
    with pytest.raises(ValueError):
        mint_token(KEYS["shop"], SHOP, ttl_s=MAX_TOKEN_TTL_S + 1)
    claims = f"v1.shop.{int(NOW + MAX_TOKEN_TTL_S + 60)}.abc"
    import base64
    import hashlib
    import hmac

    signature = base64.urlsafe_b64encode(hmac.new(SHOP_SECRET.encode(), f"{claims}.{SHOP}".encode(),
                                                  hashlib.sha256).digest()).rstrip(b"=").decode()
    with pytest.raises(Unauthenticated, match="maximum"):
        verify_token(KEYS, f"{claims}.{signature}", SHOP, now=NOW)


def test_no_error_message_repeats_the_token_or_the_secret():
    token = mint_token(KEYS["shop"], SHOP, now=NOW)
    for origin, now in ((SHOP, NOW + 1000), (EVIL, NOW), ("https://www.shop.example", NOW)):
        with pytest.raises(VoxlineError) as info:
            verify_token(KEYS, token, origin, now=now)
        assert token not in info.value.message and token.rsplit(".", 1)[1] not in info.value.message
        assert SHOP_SECRET not in info.value.message


# ---------------------------------------------------------------------------------------------- site keys


def test_site_keys_parse_with_their_defaults():
    shop, blog = KEYS["shop"], KEYS["blog"]
    assert (shop.origins, shop.tier, shop.max_sessions, shop.public) == (frozenset({SHOP}), 1, None, True)
    assert (blog.tier, blog.max_sessions, blog.public) == (None, 1, False)
    assert SHOP_SECRET not in repr(shop)
    assert parse_site_keys(json.dumps({"keys": json.loads(KEYS_JSON)})) == KEYS


def test_site_keys_come_inline_or_from_a_file(tmp_path):
    path = tmp_path / "keys.json"
    path.write_text(KEYS_JSON)
    assert load_site_keys(str(path)) == KEYS == load_site_keys(KEYS_JSON)
    assert load_site_keys("") == {}
    with pytest.raises(VoxlineError, match="cannot read"):
        load_site_keys(str(tmp_path / "missing.json"))


@pytest.mark.parametrize(("entry", "reason"), [
    ({"id": "a.b", "secret": SHOP_SECRET}, "letters, digits"),
    ({"id": "short", "secret": "tiny"}, "shorter than 16"),
    ({"id": "x", "secret": SHOP_SECRET, "origins": ["https://shop.example/path"]}, "not an origin"),
    ({"id": "x", "secret": SHOP_SECRET, "origins": ["shop.example"]}, "not an origin"),
    ({"id": "x", "secret": SHOP_SECRET, "public": True}, "public key needs origins"),
    ({"id": "x", "secret": SHOP_SECRET, "tier": 9}, "tier"),
    ({"id": "x", "secret": SHOP_SECRET, "colour": "red"}, "colour"),
    ({"id": "x"}, "secret"),
])
def test_a_bad_site_key_is_refused_with_its_entry_named_and_its_secret_unsaid(entry, reason):
    with pytest.raises(VoxlineError, match=reason) as info:
        parse_site_keys(json.dumps([entry]))
    assert "entry 0" in info.value.message
    assert entry.get("secret", "-") not in info.value.message or len(entry.get("secret", "")) < 5


def test_site_keys_must_be_a_json_list_with_unique_ids():
    with pytest.raises(VoxlineError, match="not JSON"):
        parse_site_keys("[{")
    with pytest.raises(VoxlineError, match="list"):
        parse_site_keys('"shop"')
    with pytest.raises(VoxlineError, match="twice"):
        parse_site_keys(json.dumps([{"id": "a", "secret": SHOP_SECRET}] * 2))


def test_origins_are_written_as_browsers_send_them():
    assert normalize_origin("HTTPS://Shop.Example:443/") == SHOP
    assert normalize_origin("http://localhost:8080") == "http://localhost:8080"
    assert normalize_origin("http://[::1]:80") == "http://[::1]"


def test_new_secrets_are_long_and_different():
    assert len(new_secret()) >= 40 and new_secret() != new_secret()


# ---------------------------------------------------------------------------------------------- the gate


def gate(**overrides) -> Gate:
    return Gate(Settings(**{"site_keys": KEYS_JSON, **overrides}))


def test_the_gate_refuses_origins_off_the_allowlist_at_the_handshake():
    assert gate().origins == {SHOP, BLOG}
    with pytest.raises(OriginNotAllowed):
        gate().admit("s1", Peer(EVIL, "10.0.0.1"))
    gate().admit("s1", Peer(None, "10.0.0.1"))  # not a browser: the token decides
    explicit = Gate(Settings(allowed_origins=f"{SHOP}, http://localhost:8000"))
    assert explicit.origins == {SHOP, "http://localhost:8000"} and not explicit.requires_token
    assert Gate(Settings()).origins == frozenset() and Gate(Settings(allowed_origins="*")).origins is None


@pytest.mark.parametrize(("origin", "host", "bound", "allowed"), [
    ("http://127.0.0.1:8000", "127.0.0.1:8000", "127.0.0.1", True),    # the demo page it serves
    ("http://localhost:8000", "localhost:8000", "127.0.0.1", True),
    ("http://[::1]:8000", "[::1]:8000", "127.0.0.1", True),
    ("https://voxline.example", "voxline.example", "0.0.0.0", True),   # behind TLS: Host has no port
    ("https://voxline.example", "voxline.example:443", "0.0.0.0", True),
    ("http://127.0.0.1:8001", "127.0.0.1:8000", "127.0.0.1", False),   # another port is another origin
    ("https://evil.example", "127.0.0.1:8000", "127.0.0.1", False),
    ("http://evil.example:8000", "evil.example:8000", "127.0.0.1", False),  # DNS rebinding to a local server
    ("http://evil.example:8000", "evil.example:8000", "0.0.0.0", True),  # a public server's own name
    ("null", "127.0.0.1:8000", "127.0.0.1", False),
    ("http://127.0.0.1:8000", None, "127.0.0.1", False),
])
def test_a_server_without_settings_admits_only_its_own_origin(origin, host, bound, allowed):
    g = Gate(Settings(host=bound))
    if allowed:
        g.admit("s", Peer(origin, "10.0.0.1", host))
    else:
        with pytest.raises(OriginNotAllowed):
            g.admit("s", Peer(origin, "10.0.0.1", host))
    g.admit("native", Peer(None, "10.0.0.1", host))  # no Origin: not a browser page


def test_any_origin_is_an_explicit_setting():
    Gate(Settings(allowed_origins="*")).admit("s", Peer(EVIL, "10.0.0.1", "127.0.0.1:8000"))
    listed = Gate(Settings(allowed_origins=SHOP))
    listed.admit("a", Peer(SHOP, "10.0.0.1", "127.0.0.1:8000"))
    listed.admit("b", Peer("http://127.0.0.1:8000", "10.0.0.1", "127.0.0.1:8000"))  # and still its own page


def test_the_gate_counts_sessions_per_address_and_frees_them():
    g = gate(max_sessions_per_address=2)
    g.admit("a", Peer(SHOP, "10.0.0.1"))
    g.admit("b", Peer(SHOP, "10.0.0.1"))
    g.admit("c", Peer(SHOP, "10.0.0.2"))
    with pytest.raises(TooManySessions):
        g.admit("d", Peer(SHOP, "10.0.0.1"))
    g.release("a")
    g.admit("d", Peer(SHOP, "10.0.0.1"))
    assert g.open_sessions(address="10.0.0.1") == 2 and g.open_sessions() == 3


def test_the_gate_caps_sessions_per_key_with_the_keys_own_cap_first():
    g = gate(max_sessions_per_key=2)
    for name in ("a", "b", "c"):
        g.admit(name, Peer(BLOG, name))
    assert g.authenticate("a", mint_token(KEYS["blog"], BLOG)) == KEYS["blog"]
    with pytest.raises(TooManySessions, match="'blog'"):
        g.authenticate("b", mint_token(KEYS["blog"], BLOG))  # its own max_sessions is 1
    g.release("a")
    assert g.authenticate("c", mint_token(KEYS["blog"], BLOG)) == KEYS["blog"]
    assert g.open_sessions(key_id="blog") == 1


def test_a_session_that_says_hello_twice_counts_once_on_its_key():
    g = gate()
    g.admit("a", Peer(SHOP, "10.0.0.1"))
    for _ in range(3):
        g.authenticate("a", mint_token(KEYS["shop"], SHOP))
    assert g.open_sessions(key_id="shop") == 1
    g.release("a")
    assert g.open_sessions(key_id="shop") == 0 and g.open_sessions() == 0


def test_the_shared_auth_token_still_works_alone_and_beside_site_keys():
    legacy = Gate(Settings(auth_token="s3cret"))
    with pytest.raises(Unauthorized) as info:
        legacy.authenticate("a", "guess")
    assert type(info.value) is Unauthorized  # close 4001, as before site keys
    assert legacy.authenticate("a", "s3cret") is None
    both = gate(auth_token="s3cret")
    assert both.authenticate("a", "s3cret") is None
    with pytest.raises(Unauthenticated):
        both.authenticate("a", "guess")


def test_an_open_server_needs_no_token():
    assert Gate(Settings()).authenticate("a", None) is None


# ---------------------------------------------------------------------------------------------- /ws


@pytest.fixture(scope="module")
def engines(model_dir):
    return Engines.load(Settings(llm_model=SMOLLM, tts_engine="espeak"), model_dir)


def ws_client(engines: Engines, **settings) -> TestClient:
    configured = dataclasses.replace(engines, settings=dataclasses.replace(engines.settings, **settings))
    app = Starlette(routes=[WebSocketRoute("/ws", websocket_endpoint)])
    app.state.engines, app.state.sessions = configured, {}
    return TestClient(app)


def hello(ws, token: str | None = None) -> dict:
    ws.send_text(json.dumps({"type": "hello", "v": 1, "token": token}))
    return json.loads(ws.receive_text())


def closed_with(ws) -> int:
    with pytest.raises(WebSocketDisconnect) as info:
        ws.receive_text()
    return info.value.code


def test_a_server_without_settings_welcomes_its_own_page_and_native_clients_only(engines):
    with ws_client(engines) as client:
        with client.websocket_connect("/ws", headers={"origin": EVIL}) as ws:
            assert json.loads(ws.receive_text())["code"] == "origin_not_allowed"
            assert closed_with(ws) == p.CLOSE_ORIGIN_NOT_ALLOWED
    with ws_client(engines, host="0.0.0.0") as client:  # TestClient's Host is `testserver`
        with client.websocket_connect("/ws", headers={"origin": "http://testserver"}) as ws:
            assert hello(ws)["type"] == "welcome"
        with client.websocket_connect("/ws") as ws:
            assert hello(ws)["type"] == "welcome"
    with ws_client(engines, allowed_origins="*") as client, \
            client.websocket_connect("/ws", headers={"origin": EVIL}) as ws:
        assert hello(ws)["type"] == "welcome"


def test_an_origin_off_the_allowlist_is_told_and_closed_4403_before_hello(engines, caplog):
    with ws_client(engines, allowed_origins=SHOP) as client:
        with caplog.at_level(logging.WARNING), client.websocket_connect("/ws", headers={"origin": EVIL}) as ws:
            error = json.loads(ws.receive_text())
            assert (error["type"], error["code"]) == ("error", "origin_not_allowed")
            assert closed_with(ws) == p.CLOSE_ORIGIN_NOT_ALLOWED
        assert "origin_not_allowed" in caplog.text and EVIL in caplog.text
        exposition = generate_latest(engines.metrics.registry).decode()
        assert 'voxline_rejections_total{reason="origin_not_allowed"}' in exposition
        with client.websocket_connect("/ws", headers={"origin": SHOP}) as ws:
            assert hello(ws)["type"] == "welcome"
        with client.websocket_connect("/ws") as ws:
            assert hello(ws)["type"] == "welcome"


@pytest.mark.parametrize("token", [None, "v1.shop.1.abc.def", "nonsense"])
def test_without_a_valid_token_a_keyed_server_closes_4401(engines, token):
    with ws_client(engines, site_keys=KEYS_JSON) as client, \
            client.websocket_connect("/ws", headers={"origin": SHOP}) as ws:
        assert hello(ws, token)["code"] == "unauthenticated"
        assert closed_with(ws) == p.CLOSE_UNAUTHENTICATED


def test_an_expired_token_closes_4401(engines):
    expired = mint_token(KEYS["shop"], SHOP, ttl_s=60, now=NOW)
    with ws_client(engines, site_keys=KEYS_JSON) as client, \
            client.websocket_connect("/ws", headers={"origin": SHOP}) as ws:
        error = hello(ws, expired)
        assert error["code"] == "unauthenticated" and "expired" in error["message"]
        assert closed_with(ws) == p.CLOSE_UNAUTHENTICATED


def test_a_token_whose_key_does_not_list_the_page_closes_4403(engines):
    # The blog's page presents the shop's token: the origin is allowed on the server, not on that key.
    with ws_client(engines, site_keys=KEYS_JSON) as client, \
            client.websocket_connect("/ws", headers={"origin": BLOG}) as ws:
        assert hello(ws, mint_token(KEYS["shop"], SHOP))["code"] == "origin_not_allowed"
        assert closed_with(ws) == p.CLOSE_ORIGIN_NOT_ALLOWED


def test_a_valid_token_opens_a_session_on_its_key_with_its_tier(engines):
    with ws_client(engines, site_keys=KEYS_JSON) as client:
        with client.websocket_connect("/ws", headers={"origin": SHOP}) as ws:
            assert hello(ws, mint_token(KEYS["shop"], SHOP))["type"] == "welcome"
            (session,) = client.app.state.sessions.values()
            assert session.site_key == KEYS["shop"] and session.tier == 1
        with client.websocket_connect("/ws") as ws:  # `voxline talk`, with a token minted for no origin
            assert hello(ws, mint_token(KEYS["blog"], None))["type"] == "welcome"


def test_a_key_at_its_session_cap_closes_4429_until_one_ends(engines):
    with ws_client(engines, site_keys=KEYS_JSON) as client:
        with client.websocket_connect("/ws", headers={"origin": BLOG}) as first:
            assert hello(first, mint_token(KEYS["blog"], BLOG))["type"] == "welcome"
            with client.websocket_connect("/ws", headers={"origin": BLOG}) as second:
                assert hello(second, mint_token(KEYS["blog"], BLOG))["code"] == "too_many_sessions"
                assert closed_with(second) == p.CLOSE_TOO_MANY_SESSIONS
            first.send_text('{"type": "bye"}')
            assert closed_with(first) == p.CLOSE_NORMAL
        with client.websocket_connect("/ws", headers={"origin": BLOG}) as third:
            assert hello(third, mint_token(KEYS["blog"], BLOG))["type"] == "welcome"


def test_an_address_at_its_session_cap_is_closed_4429_at_the_handshake(engines):
    with ws_client(engines, max_sessions_per_address=2) as client:
        with client.websocket_connect("/ws") as a, client.websocket_connect("/ws") as b:
            assert hello(a)["type"] == hello(b)["type"] == "welcome"
            with client.websocket_connect("/ws") as c:
                assert json.loads(c.receive_text())["code"] == "too_many_sessions"
                assert closed_with(c) == p.CLOSE_TOO_MANY_SESSIONS
        with client.websocket_connect("/ws") as d:  # the first two are gone
            assert hello(d)["type"] == "welcome"


def test_refusals_are_logged_with_key_origin_and_address_never_the_token(engines, caplog):
    token = mint_token(KEYS["shop"], SHOP, ttl_s=60, now=NOW)
    with ws_client(engines, site_keys=KEYS_JSON) as client, caplog.at_level(logging.WARNING):
        with client.websocket_connect("/ws", headers={"origin": SHOP}) as ws:
            hello(ws, token)
            closed_with(ws)
    (record,) = [r for r in caplog.records if "refused a session" in r.getMessage()]
    line = record.getMessage()
    assert "unauthenticated" in line and "key=shop" in line and SHOP in line and "testclient" in line
    assert token not in caplog.text and token.rsplit(".", 1)[1] not in caplog.text and SHOP_SECRET not in caplog.text


# ---------------------------------------------------------------------------------------------- /token


def token_client(**settings) -> TestClient:
    configured = Settings(**{"site_keys": KEYS_JSON, **settings})
    return TestClient(Starlette(routes=token_routes(Gate(configured), configured)))


def test_token_mints_for_a_page_of_a_public_key_and_lets_it_read_the_answer():
    response = token_client().post("/token?key=shop", headers={"origin": SHOP})
    assert response.status_code == 200
    assert response.headers["access-control-allow-origin"] == SHOP
    assert response.headers["cache-control"] == "no-store" and response.headers["vary"] == "Origin"
    body = response.json()
    assert body["key_id"] == "shop" and body["ttl_s"] == 300.0
    assert verify_token(KEYS, body["token"], SHOP) is KEYS["shop"]
    assert token_expiry(body["token"]) == body["expires_at"]


@pytest.mark.parametrize(("query", "origin", "status", "code"), [
    ("key=shop", EVIL, 403, "origin_not_allowed"),
    ("key=shop", None, 403, "origin_not_allowed"),
    ("key=blog", BLOG, 404, "unknown_key"),  # private: its tokens come from the blog's own backend
    ("key=nope", SHOP, 404, "unknown_key"),
    ("", SHOP, 404, "unknown_key"),
])
def test_token_refuses_other_pages_and_private_or_unknown_keys(query, origin, status, code):
    response = token_client().post(f"/token?{query}", headers={"origin": origin} if origin else {})
    assert (response.status_code, response.json()["code"]) == (status, code)
    assert "token" not in response.json()
    assert "access-control-allow-origin" not in response.headers


def test_token_is_rate_limited_per_address():
    client = token_client(token_requests_per_minute=3)
    codes = [client.post("/token?key=shop", headers={"origin": SHOP}).status_code for _ in range(4)]
    assert codes == [200, 200, 200, 429]
    refused = client.post("/token?key=shop", headers={"origin": SHOP})
    assert refused.json()["code"] == "rate_limited" and int(refused.headers["retry-after"]) >= 1


def test_token_is_post_only():
    assert token_client().get("/token?key=shop", headers={"origin": SHOP}).status_code == 405


# ---------------------------------------------------------------------------------------------- voxline talk


def test_voxline_talk_uses_a_token_minted_for_no_origin_and_names_the_fix_without_one():
    import subprocess
    import sys

    from e2e.harness import ServerThread

    with ServerThread(Settings.from_env(llm_model=SMOLLM, tts_engine="espeak", site_keys=KEYS_JSON)) as server:
        url = server.url.replace("http://", "ws://") + "/ws"

        def talk(*args: str) -> subprocess.CompletedProcess:
            return subprocess.run([sys.executable, "-m", "voxline.cli", "talk", "--server", url, "--text", "pause",
                                   "--no-play", "--json", *args], capture_output=True, text=True, timeout=120)

        token = mint_token(KEYS["shop"], None)
        answered = talk("--token", token)
        assert answered.returncode == 0, answered.stderr
        assert any(json.loads(line).get("intent") == "media.pause" for line in answered.stdout.splitlines())
        refused = talk()
        assert refused.returncode == 2 and "error [unauthenticated]" in refused.stderr
        assert "voxline token mint" in refused.stderr and "Traceback" not in refused.stderr
