"""`voxline bench load-page`: what a first and a returning visit download, and how soon the page is ready.

Each page (the demo page, and the one-line widget embedded in a plain page of another origin, not cross-origin
isolated) is visited twice in Chromium: a first visit on a new profile, then a returning one on the same profile
(`RETURNING_MODES`: a second page load in the same browser context, as issue 18 measured, or Chromium closed and
started again on an on-disk profile). Every byte goes through a counting proxy (`e2e/bench/proxy.py`, which
says why a proxy rather than DevTools events); with `--profile` the proxy also shapes the traffic (e.g. 50 Mbit/s,
40 ms round trip).

A visit is over when `voxline:ready` has fired and what loads after it is up too: the grammar engine (Pyodide) and
the turn model (smart-turn), so that every byte of the visit is counted. Time to ready is `voxline:ready`'s `t`: ms
since the document's navigation started.

Prints one JSON object: per page and visit, the bytes from the server (total and per resource), time to ready,
time to the grammar engine, what `voxline:ready` reports of its phases and files, and where the grammar engine's
files came from (`engine_files`).
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

from e2e.bench.proxy import PROFILES, CountingProxy, Transfer
from e2e.harness import CHROMIUM, CHROMIUM_FLAGS, RECORD_EVENTS, HostPage, ServerThread, wait_for_js

VISIT_TIMEOUT_S = 180.0
"""Longest a visit may take to ready and to the grammar engine (a loaded 2-core machine, a throttled link)."""
HOST_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>A shop</title></head>
<body><h1>A shop that embeds Voxline</h1>
<script src="{voxline}/widget.js" data-server="{ws}"></script></body></html>
"""
RETURNING_MODES = {
    "same-context": "a second page load in the same browser context (Playwright's default context: off the record, "
                    "an in-memory HTTP cache that keeps no big file; issue 18's measurement)",
    "restart": "Chromium closed and started again on the same on-disk profile (a disk HTTP cache, where files "
               "without Cache-Control are kept for a heuristic time: ~10 % of their age)",
    "same-profile": "a second page load in the same browser, on an on-disk profile, as a user's own browser has (a "
                    "disk HTTP cache, beside which Chromium keeps the wasm code it compiled; an off-the-record "
                    "context keeps neither)",
}
AFTER_READY_UP = ("{v}?.intents?.ready && ({v}.turnDetectionState === undefined "
                  "|| ['up', 'off'].includes({v}.turnDetectionState))")
"""Everything that loads after `ready` is up (or has failed, which the visit's errors then show); a page from before
smart-turn loaded after `ready` has no `turnDetectionState` (so a server of an older version can be measured)."""
DEMO_VOXLINE = "window.voxline"
WIDGET_VOXLINE = "document.querySelector('voxline-assistant')?.voxline"
"""Where each page keeps its `Voxline` (a JavaScript expression)."""


def persistent_context(playwright, profile_dir: Path, proxy: CountingProxy):
    """Chromium on an on-disk profile, every request through `proxy`."""
    return playwright.chromium.launch_persistent_context(
        str(profile_dir), executable_path=CHROMIUM, args=[*CHROMIUM_FLAGS, *proxy.chromium_args],
        permissions=["microphone"])


def visit_series(playwright, proxy: CountingProxy, url: str, voxline: str, returning: str,
                 returns: int) -> tuple[dict, list[dict]]:
    """A first visit of `url`, then `returns` returning visits one after another (see RETURNING_MODES): a browser
    keeps more of the wasm it compiled the more often the page has run (Chromium's code cache grows as code is
    optimised), so a returning visit after several differs from the first return."""
    def one_after_another(context) -> tuple[dict, list[dict]]:
        visits = [visit(context, proxy, url, voxline) for _ in range(1 + returns)]
        return visits[0], visits[1:]

    if returning == "restart":
        with tempfile.TemporaryDirectory(prefix="voxline-load-page-") as profile_dir:
            visits = []
            for _ in range(1 + returns):
                context = persistent_context(playwright, Path(profile_dir), proxy)
                try:
                    visits.append(visit(context, proxy, url, voxline))
                finally:
                    context.close()
            return visits[0], visits[1:]
    if returning == "same-profile":
        with tempfile.TemporaryDirectory(prefix="voxline-load-page-") as profile_dir:
            context = persistent_context(playwright, Path(profile_dir), proxy)
            try:
                return one_after_another(context)
            finally:
                context.close()
    browser = playwright.chromium.launch(executable_path=CHROMIUM, args=[*CHROMIUM_FLAGS, *proxy.chromium_args])
    try:
        context = browser.new_context(permissions=["microphone"])
        return one_after_another(context)
    finally:
        browser.close()


def visit(context, proxy: CountingProxy, url: str, voxline: str) -> dict:
    """One visit in a new page of `context` (its `Voxline` at the expression `voxline`): bytes through the proxy,
    ready and engine times, and where the files of each came from."""
    engine_up = AFTER_READY_UP.format(v=voxline)
    page = context.new_page()
    try:
        page.add_init_script(RECORD_EVENTS)
        proxy.take()
        began = time.monotonic()
        page.goto(url)
        wait_for_js(page, "window.__vx.some((e) => e.name === 'ready' || e.name === 'error')", VISIT_TIMEOUT_S)
        events = page.evaluate("window.__vx")
        errors = [e for e in events if e["name"] == "error"]
        ready = next((e for e in events if e["name"] == "ready"), None)
        if ready is None:
            raise RuntimeError(f"the page reported an error before ready: {errors}")
        wait_for_js(page, f"({engine_up}) || window.__vx.some((e) => e.name === 'error')", VISIT_TIMEOUT_S)
        engine_s = time.monotonic() - began
        errors = [e for e in page.evaluate("window.__vx") if e["name"] == "error"]
        engine_files = page.evaluate(f"({voxline})?.intents?.engineLoad?.files ?? []")
        transfers = proxy.take()
    finally:
        page.close()
    return _summary(transfers, ready, engine_s, errors, engine_files)


def _summary(transfers: list[Transfer], ready: dict, engine_s: float, errors: list[dict],
             engine_files: list[dict]) -> dict:
    resources = sorted(({"url": _short(t.url), "status": t.status, "bytes": t.bytes, "encoding": t.encoding}
                        for t in transfers), key=lambda r: -r["bytes"])
    return {
        "bytes": sum(t.bytes for t in transfers),
        "requests": len(transfers),
        "ready_ms": round(ready["t"]),
        "engine_ready_s": round(engine_s, 2),
        "ready_reports": {k: ready.get(k) for k in ("load_ms", "phases", "bytes", "files") if k in ready},
        "engine_files": engine_files,
        "errors": [f"{e.get('code')}: {e.get('message')}" for e in errors],
        "resources": resources,
    }


def _short(url: str) -> str:
    if url.startswith("CONNECT "):
        return url
    parts = urlsplit(url)
    query = f"?{parts.query[:20]}…" if parts.query else ""
    return f"{parts.netloc}{parts.path}{query}"


def run(server_url: str, host_port: int | None, profile_name: str | None, pages: list[str],
        returning: str = "same-context", returns: int = 1) -> dict:
    """Cold and warm visits of each page in `pages` ('demo', 'widget'): `returns` returning visits, the first as
    `returning`, the others as `returning_later`."""
    from playwright.sync_api import sync_playwright

    profile = PROFILES[profile_name] if profile_name else None
    out: dict = {"server": server_url, "profile": profile_name or "loopback (unthrottled)",
                 "returning_visit": RETURNING_MODES[returning], "pages": {}}
    host = None
    if "widget" in pages:
        ws = server_url.replace("http://", "ws://") + "/ws"
        host = HostPage(HOST_PAGE.format(voxline=server_url, ws=ws), host_port or 0)
    targets = {"demo": (server_url + "/", DEMO_VOXLINE)}
    if host:
        targets["widget"] = (host.url, WIDGET_VOXLINE)
    try:
        with CountingProxy(profile) as proxy, sync_playwright() as pw:
            for name in pages:
                url, voxline = targets[name]
                cold, warm = visit_series(pw, proxy, url, voxline, returning, returns)
                out["pages"][name] = {"first": cold, "returning": warm[0],
                                      **({"returning_later": warm[1:]} if returns > 1 else {})}
                labels = ["first", "returning", *(f"return {k}" for k in range(2, returns + 1))]
                for kind, result in zip(labels, (cold, *warm)):
                    print(f"{name:6} {kind:9} {result['bytes'] / 1e6:8.2f} MB in {result['requests']:3} requests, "
                          f"ready {result['ready_ms'] / 1000:5.2f} s, all loaded (grammar engine, turn model) "
                          f"{result['engine_ready_s']:5.2f} s",
                          file=sys.stderr)
    finally:
        if host:
            host.close()
    return out


def compare(server_url: str, profile_name: str | None, baseline_query: str, returning: str = "same-context",
            returns: int = 1, rounds: int = 4) -> dict:
    """The demo page as it is beside the demo page with `baseline_query` (page settings, `&vx.NAME=value`: the design
    before), each round one visit series of each (a new context: a first visit, then `returns` returning ones), the
    two alternating which goes first, on one server and one machine. Times to `voxline:ready` by visit kind."""
    from playwright.sync_api import sync_playwright

    from voxline.bench.stats import summary

    query = baseline_query.lstrip("&?")
    urls = {"voxline": server_url + "/", "baseline": f"{server_url}/?{query}"}
    ready: dict = {name: {"first": [], "returning": []} for name in urls}
    phases: dict = {name: {"first": [], "returning": []} for name in urls}
    profile = PROFILES[profile_name] if profile_name else None
    with CountingProxy(profile) as proxy, sync_playwright() as pw:
        for round_ in range(rounds):
            for name in (("voxline", "baseline") if round_ % 2 == 0 else ("baseline", "voxline")):
                cold, warm = visit_series(pw, proxy, urls[name], DEMO_VOXLINE, returning, returns)
                ready[name]["first"].append(cold["ready_ms"])
                ready[name]["returning"].extend(w["ready_ms"] for w in warm)
                for kind, visits in (("first", [cold]), ("returning", warm)):
                    phases[name][kind].extend(_phase_ms(v["ready_reports"]) for v in visits)
                print(f"round {round_ + 1} {name:8} first {cold['ready_ms'] / 1000:5.2f} s, returning "
                      + " / ".join(f"{w['ready_ms'] / 1000:.2f}" for w in warm) + " s", file=sys.stderr)
    figures = {name: {kind: {**summary(times), "all": times} for kind, times in kinds.items()}
               for name, kinds in ready.items()}
    return {"server": server_url, "profile": profile_name or "loopback (unthrottled)", "page": "demo",
            "returning_visit": RETURNING_MODES[returning], "baseline_query": query, "rounds": rounds,
            "ready_ms": figures,
            "phases_p50_ms": {name: {kind: {stage: summary([v[stage] for v in visits if stage in v])["p50"]
                                            for stage in sorted({k for v in visits for k in v})}
                                     for kind, visits in kinds.items()} for name, kinds in phases.items()},
            "ratio_p50": {kind: round(figures["voxline"][kind]["p50"] / figures["baseline"][kind]["p50"], 3)
                          for kind in ("first", "returning")}}


def _phase_ms(report: dict) -> dict[str, float]:
    """A visit's `voxline:ready` phases that are durations (ms), and the load's own time (`load_ms`)."""
    durations = {k: v for k, v in (report.get("phases") or {}).items() if isinstance(v, (int, float))}
    return {**durations, "load_ms": report["load_ms"]} if "load_ms" in report else durations


def main(args) -> int:
    pages = args.pages or ["demo", "widget"]
    if args.returns < 1:
        print("voxline bench load-page: --returns must be 1 or more", file=sys.stderr)
        return 2
    if args.baseline_query:
        if args.pages and args.pages != ["demo"]:
            print("voxline bench load-page: --baseline-query compares the demo page (its settings come from its URL)",
                  file=sys.stderr)
            return 2
        if args.url:
            result = compare(args.url.rstrip("/"), args.profile, args.baseline_query, args.returning, args.returns,
                             args.rounds)
        else:
            with ServerThread() as server:
                result = compare(server.url, args.profile, args.baseline_query, args.returning, args.returns,
                                 args.rounds)
        print(json.dumps(result, indent=2))
        return 0
    if args.url:
        result = run(args.url.rstrip("/"), args.host_port, args.profile, pages, args.returning, args.returns)
    else:
        import socket

        from voxline.config import Settings

        with socket.socket() as sock:  # the widget's host page origin, which the server must admit
            sock.bind(("127.0.0.1", 0))
            host_port = args.host_port or sock.getsockname()[1]
        settings = Settings.from_env(allowed_origins=f"http://localhost:{host_port}")
        with ServerThread(settings) as server:
            result = run(server.url, host_port, args.profile, pages, args.returning, args.returns)
    if not args.resources:
        for page in result["pages"].values():
            for visit in (page["first"], page["returning"], *page.get("returning_later", [])):
                visit["resources"] = visit["resources"][:args.top]
    print(json.dumps(result, indent=2))
    return 0

