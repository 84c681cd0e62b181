"""The `voxline` command line: serve, models, talk, bench."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

from voxline import paths
from voxline.errors import VoxlineError


def _cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from voxline.config import Settings
    from voxline.server.app import create_app
    from voxline.server.limits import uvicorn_options

    overrides = {"host": args.host, "port": args.port, "llm_model": args.llm, "workers": args.workers,
                 "batching": None if args.batching is None else args.batching == "on",
                 "otlp_endpoint": args.otlp_endpoint, "engine": args.engine, "ray_address": args.ray_address,
                 "forwarded_allow_ips": args.forwarded_allow_ips, "allowed_origins": args.allowed_origins}
    settings = Settings.from_env(**overrides)
    if settings.engine == "ray" and settings.workers > 1 and not settings.ray_address:
        raise VoxlineError("--engine ray with --workers N needs one shared cluster: start it with `ray start "
                           "--head` and pass --ray-address auto (each worker would start its own Ray otherwise)")
    print(f"Voxline demo on http://{settings.host}:{settings.port}/", file=sys.stderr, flush=True)
    if settings.workers <= 1:
        uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level=args.log_level,
                    **uvicorn_options(settings))
        return 0
    # Each worker process builds its own app (and loads its own models) from the environment, so the flags
    # travel as VOXLINE_* variables. Checked here first, so a missing model is refused once, in this process.
    create_app(settings)
    for name, value in overrides.items():
        if value is not None:
            os.environ[f"VOXLINE_{name.upper()}"] = ("on" if value else "off") if isinstance(value, bool) else str(value)
    uvicorn.run("voxline.server.app:app_from_env", factory=True, host=settings.host, port=settings.port,
                workers=settings.workers, log_level=args.log_level, **uvicorn_options(settings, worker_processes=True))
    return 0


def _cmd_token_mint(args: argparse.Namespace) -> int:
    from voxline.config import Settings
    from voxline.server.auth import load_site_keys, mint_token, normalize_origin

    settings = Settings.from_env()
    key = load_site_keys(settings.site_keys).get(args.key)
    if key is None:
        raise VoxlineError(f"no site key {args.key!r}: set VOXLINE_SITE_KEYS to the keys (a JSON list or file)")
    try:
        origin = normalize_origin(args.origin) if args.origin else None
    except ValueError as exc:
        raise VoxlineError(str(exc)) from None
    if origin is not None and origin not in key.origins:
        raise VoxlineError(f"site key {key.id!r} does not list {origin}; its origins: {', '.join(sorted(key.origins))}")
    print(mint_token(key, origin, ttl_s=args.ttl if args.ttl is not None else settings.token_ttl_s))
    return 0


def _cmd_token_secret(args: argparse.Namespace) -> int:
    from voxline.server.auth import new_secret

    print(new_secret())
    return 0


def _cmd_models_fetch(args: argparse.Namespace) -> int:
    from voxline.models import load_manifest
    from voxline.models.supply import cache_lock, fetch
    from voxline.server.assets import precompress_browser_assets
    from voxline.server.runtimes import fetch_runtimes

    manifest = load_manifest()
    fetch(manifest, args.names or None, record=args.record)
    with cache_lock():  # the browser runtimes (onnxruntime-web, Pyodide): pinned npm tarballs, like the models
        fetch_runtimes()
    # Brotli and gzip variants of what the page downloads (built once, skipped when present): see server/assets.py.
    precompress_browser_assets(manifest, log_line=lambda line: print(line, file=sys.stderr))
    print(f"models ready in {paths.cache_dir()}", file=sys.stderr)
    return 0


def _cmd_models_verify(args: argparse.Namespace) -> int:
    from voxline.models import load_manifest
    from voxline.models.supply import verify_model
    from voxline.server.runtimes import RUNTIMES, read_runtime_file

    manifest = load_manifest()
    specs = [manifest.model(n) for n in args.names] if args.names else list(manifest.models)
    problems = [p for spec in specs for p in verify_model(spec)]
    if not args.names:  # and the browser runtimes, which `voxline models fetch` unpacks beside them
        problems += [file.problem for package in RUNTIMES for name in package.files
                     if (file := read_runtime_file(package, name)).problem]
    missing_tools = [t for t in manifest.system if not shutil.which(t.command)]
    for problem in problems:
        print(f"FAIL {problem}", file=sys.stderr)
    for tool in missing_tools:
        print(f"FAIL {tool.name}: `{tool.command}` not found (apt-get install {tool.debian})", file=sys.stderr)
    if problems or missing_tools:
        print("Run `voxline models fetch` to rebuild what is missing or altered.", file=sys.stderr)
        return 1
    runtimes = "" if args.names else " and the browser runtimes"
    print(f"all {len(specs)} models{runtimes} verified in {paths.cache_dir()}")
    return 0


def _cmd_models_list(args: argparse.Namespace) -> int:
    from voxline.models import load_manifest
    from voxline.server.runtimes import RUNTIMES

    manifest = load_manifest()
    rows = []
    for spec in manifest.models:
        folder = paths.model_dir(spec.name)
        size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else None
        sources = sorted(manifest.packages[p].requirement for p in spec.packages()) or spec.model_inputs()
        rows.append({"name": spec.name, "role": spec.role, "size_bytes": size, "path": str(folder),
                     "source": ", ".join(sources)})
    for package in RUNTIMES:  # unpacked by `voxline models fetch` beside the models
        folder = package.directory()
        present = [folder / name for name in package.files if (folder / name).is_file()]
        rows.append({"name": package.name, "role": "runtime",
                     "size_bytes": sum(p.stat().st_size for p in present) if present else None, "path": str(folder),
                     "source": package.package_spec().requirement})
    for tool in manifest.system:
        found = shutil.which(tool.command)
        rows.append({"name": tool.name, "role": tool.role, "size_bytes": None, "path": found or "(not installed)",
                     "source": f"debian:{tool.debian}"})
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{'name':28} {'role':14} {'size':>9}  {'path':52} source")
    for r in rows:
        size = f"{r['size_bytes'] / 2**20:.1f} MiB" if r["size_bytes"] is not None else "-"
        print(f"{r['name']:28} {r['role']:14} {size:>9}  {r['path']:52} {r['source']}")
    return 0


def _cmd_talk(args: argparse.Namespace) -> int:
    from voxline.client import TalkOptions, print_devices, run

    if args.list_devices:
        return print_devices(args.json)
    options = TalkOptions(
        server=args.server, wav=args.wav, text=args.text, fast=args.fast, input_device=args.input,
        output_device=args.output, play=not args.no_play, save_reply=args.save_reply, json=args.json,
        once=args.once, lang=args.lang, token=args.token if args.token is not None else os.environ.get(
            "VOXLINE_AUTH_TOKEN") or None,
    )
    return run(options)


BROWSER_BENCHES = ("asr", "intents", "cutoffs", "turn", "load-page")
"""`voxline bench` commands that drive Chromium. Their code is the checkout's `e2e/bench/`, beside the e2e harness,
and not part of the package: Playwright is a test dependency, and the wheel never imports it."""


def _cmd_bench(args: argparse.Namespace) -> int:
    import importlib.util

    module_name = args.bench_command.replace("-", "_")
    if args.bench_command not in BROWSER_BENCHES:
        return importlib.import_module(f"voxline.bench.{module_name}").main(args)
    root = _checkout_root()
    if root is None:
        raise VoxlineError(f"`voxline bench {args.bench_command}` drives Chromium, so it runs from a checkout of the "
                           "Voxline repository (its e2e/bench/ is not part of the package): in the checkout, "
                           "pip install -e '.[bench,test]'")
    if importlib.util.find_spec("playwright") is None:
        raise VoxlineError(f"`voxline bench {args.bench_command}` drives Chromium through Playwright, which is in the "
                           "test extra: pip install -e '.[bench,test]'")
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    return importlib.import_module(f"e2e.bench.{module_name}").main(args)


def _checkout_root() -> Path | None:
    """The git checkout this package runs from (an editable install, or `PYTHONPATH=backend`) when it holds the
    browser benchmarks; None for an installed wheel."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "e2e" / "bench" / "__init__.py").is_file() else None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="voxline", description="Voxline voice assistant stack")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="serve the demo page, widget, WebSocket, /healthz and /metrics")
    serve.add_argument("--host", default=None, help="address to bind (default 127.0.0.1; VOXLINE_HOST)")
    serve.add_argument("--port", type=int, default=None, help="port (default 8000; VOXLINE_PORT)")
    serve.add_argument("--llm", default=None, help="manifest name of the LLM (VOXLINE_LLM_MODEL)")
    serve.add_argument("--workers", type=int, default=None,
                       help="server processes sharing the port, each with its own models (default 1; VOXLINE_WORKERS)")
    serve.add_argument("--batching", choices=["on", "off"], default=None,
                       help="dynamic LLM batching with priority lanes, or one reply at a time (VOXLINE_BATCHING)")
    serve.add_argument("--otlp-endpoint", default=None, metavar="URL",
                       help="export OpenTelemetry traces to this OTLP/HTTP traces URL (VOXLINE_OTLP_ENDPOINT)")
    serve.add_argument("--engine", choices=["embedded", "ray"], default=None,
                       help="where the models run: in this process (default), or as Ray Serve deployments "
                            "(pip install voxline[ray]; docs/deploy.md) (VOXLINE_ENGINE)")
    serve.add_argument("--ray-address", default=None, metavar="ADDRESS",
                       help="with --engine ray: the Ray cluster (auto, HOST:6379); default: start a local Ray "
                            "instance (VOXLINE_RAY_ADDRESS)")
    serve.add_argument("--forwarded-allow-ips", default=None, metavar="IPS",
                       help="proxies (IPs or CIDR networks, comma-separated) whose X-Forwarded-For gives the client "
                            "address; default none (VOXLINE_FORWARDED_ALLOW_IPS; docs/deploy.md)")
    serve.add_argument("--allowed-origins", default=None, metavar="ORIGINS",
                       help="web origins, besides the server's own, whose pages may open /ws; * for any "
                            "(VOXLINE_ALLOWED_ORIGINS)")
    serve.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    serve.set_defaults(func=_cmd_serve)

    models = sub.add_parser("models", help="build, check and list the models").add_subparsers(
        dest="models_command", required=True)
    fetch = models.add_parser("fetch", help="download pinned packages and build models not yet built and verified")
    fetch.add_argument("names", nargs="*", help="models to build (default: all)")
    fetch.add_argument("--record", action="store_true",
                       help="maintainers: write the built digests into the manifest instead of checking them")
    fetch.set_defaults(func=_cmd_models_fetch)
    verify = models.add_parser("verify", help="re-hash every model file against the manifest")
    verify.add_argument("names", nargs="*")
    verify.set_defaults(func=_cmd_models_verify)
    listing = models.add_parser("list", help="name, role, size, path and source of every model")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(func=_cmd_models_list)

    talk = sub.add_parser("talk", help="talk to a Voxline server from the microphone, a WAV file or text",
                          description="A client on the page's protocol. With --json: one JSON object per event "
                                      "(the browser's event names and fields); exits when the turn is over.")
    talk.add_argument("--server", default="ws://127.0.0.1:8000/ws", help="the server's WebSocket URL")
    source = talk.add_mutually_exclusive_group()
    source.add_argument("--wav", type=Path, help="speak this audio file as one turn (default: the microphone)")
    source.add_argument("--text", help="send a typed turn instead of speech")
    source.add_argument("--list-devices", action="store_true", help="list the audio devices and exit")
    talk.add_argument("--fast", action="store_true", help="with --wav: send as fast as possible, not in real time")
    talk.add_argument("--input", help="microphone: device index or name (default: the system's)")
    talk.add_argument("--output", help="speaker: device index or name (default: the system's)")
    talk.add_argument("--save-reply", type=Path, metavar="FILE.wav",
                      help="write the reply audio to FILE.wav (not played unless --output is given)")
    talk.add_argument("--no-play", action="store_true", help="do not play the reply audio")
    talk.add_argument("--json", action="store_true", help="one JSON object per event on stdout")
    talk.add_argument("--once", action="store_true", help="microphone: exit after the first turn")
    talk.add_argument("--lang", default="en", help="BCP 47 language of the conversation (default en)")
    talk.add_argument("--token", default=None,
                      help="a site key token (`voxline token mint --key ID`) or the server's shared auth token "
                           "(default: $VOXLINE_AUTH_TOKEN)")
    talk.set_defaults(func=_cmd_talk)

    token = sub.add_parser("token", help="site key tokens, for a host site's backend (docs/protocol.md)")
    token_sub = token.add_subparsers(dest="token_command", required=True)
    mint = token_sub.add_parser("mint", help="print a token of a site key from $VOXLINE_SITE_KEYS")
    mint.add_argument("--key", required=True, help="the site key's id")
    mint.add_argument("--origin", default=None,
                      help="the page origin the token is for (omit for clients that send no Origin, e.g. talk)")
    mint.add_argument("--ttl", type=float, default=None, help="lifetime in seconds (default $VOXLINE_TOKEN_TTL_S, 300)")
    mint.set_defaults(func=_cmd_token_mint)
    secret = token_sub.add_parser("secret", help="print a new random secret for a site key")
    secret.set_defaults(func=_cmd_token_secret)

    bench = sub.add_parser("bench", help="benchmarks; each prints a JSON summary").add_subparsers(
        dest="bench_command", required=True)
    bench_asr = bench.add_parser("asr", help="on-device ASR in headless Chromium: utterance window vs 30 s baseline")
    bench_asr.add_argument("--rounds", type=int, default=2, help="passes over the commands, configurations alternating")
    bench_asr.add_argument("--voice", choices=["hibari", "espeak"], default="hibari")
    bench_asr.set_defaults(func=_cmd_bench)
    bench_intents = bench.add_parser(
        "intents", help="end of speech → voxline:intent per source, vs an 800 ms endpoint; --set: accuracy on a set",
        description="Without --set: zero-round-trip latency on a few commands. With --set FILE (one JSON object a "
                    "line, see voxline/bench/sets/README.md): the set spoken by synthetic voices, clean and noisy, "
                    "through the demo page in Chromium, current defaults beside the baseline; JSON on stdout, "
                    "the wrong answers on stderr.")
    bench_intents.add_argument("--rounds", type=int, default=1)
    bench_intents.add_argument("--set", type=Path, metavar="FILE",
                               help="evaluation set, e.g. backend/voxline/bench/sets/commands-en.jsonl")
    bench_intents.add_argument("--voices", action="append", metavar="A,B",
                               help="voices for --set (default espeak-gb,espeak-us-f3-slow,hibari-1; have "
                                    "espeak-us, espeak-gb, espeak-us-f3-slow, espeak-rp-fast, hibari-1, "
                                    "hibari-2-slow, hibari-3-fast)")
    bench_intents.add_argument("--noise-snr-db", type=_snr_db, default=10.0, metavar="DB",
                               help="also a noisy copy of every page: pink noise this many dB below speech "
                                    "(default 10; 'none' for clean only)")
    bench_intents.add_argument("--limit", type=int, metavar="N", help="only N items, spread evenly over the set")
    bench_intents.add_argument("--llm", default=None, help="server LLM for --set (default: the server's default)")
    bench_intents.add_argument("--second-hearing", action="store_true",
                               help="each page says its commands twice; the second hearing measures the learned cache")
    bench_intents.add_argument("--baseline-query", metavar="QUERY",
                               help="--set: page settings of the baseline instead of the default baseline, e.g. "
                                    "'&vx.promotePartials=0' (its server then has today's settings, unless "
                                    "--baseline-server says otherwise)")
    bench_intents.add_argument("--baseline-server", action="append", metavar="NAME=VALUE",
                               help="--set: a server setting of the baseline instead of the default baseline's "
                                    "(repeatable), e.g. intent_neighbours=off")
    bench_intents.add_argument("--json-out", type=Path, metavar="FILE",
                               help="also write the report with every outcome, and FILE.errors.txt")
    bench_intents.set_defaults(func=_cmd_bench)
    bench_cutoffs = bench.add_parser(
        "cutoffs", help="false cut-offs: turns ended inside utterances with short pauses, beside a baseline",
        description="Utterances with mid-sentence pauses (synthetic voices with 150-500 ms pauses placed between "
                    "phrases, and recorded prompts of a human speaker) through the demo page in Chromium: how often "
                    "a turn ends, or a command acts, inside one; end of speech -> turn over. JSON on stdout, the "
                    "cuts on stderr.")
    bench_cutoffs.add_argument("--set", type=Path, default=None, metavar="FILE",
                               help="phrases separated by '|', one utterance a line (default: "
                                    "voxline/bench/sets/pauses-en.txt)")
    bench_cutoffs.add_argument("--voices", action="append", metavar="A,B",
                               help="synthetic voices (default espeak-gb,hibari-1)")
    bench_cutoffs.add_argument("--recorded", type=int, default=48, metavar="N",
                               help="recorded single-sentence prompts (default 48; 0: none)")
    bench_cutoffs.add_argument("--limit", type=int, metavar="N", help="only N lines of the set and N recorded")
    bench_cutoffs.add_argument("--baseline-query", metavar="QUERY",
                               help="page settings of a baseline heard beside today's defaults, e.g. "
                                    "'&vx.turnCompleteProb=0.7'")
    bench_cutoffs.add_argument("--llm", default="smollm2-135m-instruct-ct2", help="server LLM (answers questions)")
    bench_cutoffs.add_argument("--json-out", type=Path, metavar="FILE", help="also write every outcome")
    bench_cutoffs.set_defaults(func=_cmd_bench)
    bench_turn = bench.add_parser(
        "turn", help="first reply audio: server (vs non-streaming); browser TTFA and keyword accuracy",
        description="Server: first reply audio of typed turns beside the non-streaming pipeline. --browser N: N "
                    "questions of a held-out set spoken by synthetic voices through the demo page in Chromium: end "
                    "of speech -> first reply audio and -> turn over, keyword accuracy of the replies, missed turns, "
                    "the server's speculation counters; --baseline-query hears the same pages with other page "
                    "settings in the same run. JSON on stdout, the replies not right on stderr.")
    bench_turn.add_argument("--questions", type=int, default=20, help="server-side questions (default 20; 0: none)")
    bench_turn.add_argument("--speculate-ms", type=float, default=0.0, metavar="MS",
                            help="server side: also each question as a speculative turn confirmed MS later (the "
                                 "page's head start), timed from the confirmation")
    bench_turn.add_argument("--browser", type=int, default=0, metavar="N",
                            help="also N spoken questions of --set in Chromium, spread evenly over it")
    bench_turn.add_argument("--set", type=Path, default=None, metavar="FILE",
                            help="questions with expected keywords, one JSON object a line (default "
                                 "voxline/bench/sets/questions-en.jsonl); given, the server questions come from it "
                                 "too")
    bench_turn.add_argument("--voices", action="append", metavar="A,B",
                            help="voices for --browser (default espeak-gb,hibari-1; see bench intents --help)")
    bench_turn.add_argument("--baseline-query", metavar="QUERY",
                            help="--browser: also the page with these settings, alternating, e.g. "
                                 "'&vx.speculativeTurns=false'")
    bench_turn.add_argument("--baseline-server", action="append", metavar="NAME=VALUE",
                            help="also a server with this setting (repeatable), e.g. classify_beside_chat=false: "
                                 "every server question asked of both, alternating, and with --browser the "
                                 "baseline's pages served by it")
    bench_turn.add_argument("--llm", default="qwen2.5-0.5b-instruct-ct2",
                            help="server LLM (default %(default)s; smollm2-135m-instruct-ct2 for speed)")
    bench_turn.set_defaults(func=_cmd_bench)
    bench_classify = bench.add_parser(
        "classify", help="the server's intent classifier on text: paraphrases and out-of-domain, beside 'off'")
    bench_classify.add_argument("--llm", action="append", metavar="NAME",
                                help="LLM (repeatable; default: both, Qwen2.5 0.5B and SmolLM2 135M)")
    bench_classify.add_argument("--threads", type=int, default=1, help="CPU threads of the LLM (default 1)")
    bench_classify.add_argument("--min-command-prob", type=float, default=None,
                                help="acceptance threshold (default: the calibrated one)")
    bench_classify.add_argument("--rows", action="store_true", help="also every utterance's verdict")
    bench_classify.add_argument("--set", metavar="FILE",
                                help="instead: an evaluation set's written text (voxline/bench/sets/README.md), the "
                                     "grammar alone and, for each --llm given, the grammar then the classifier")
    bench_classify.add_argument("--baseline-skills", metavar="A.yaml,B.yaml",
                                help="with --set: also the grammar of these skill files, beside the built-in one")
    bench_classify.add_argument("--errors", action="store_true", help="with --set: every wrong or missed answer")
    bench_classify.set_defaults(func=_cmd_bench)
    bench_readings = bench.add_parser(
        "readings", help="what the device acts on: grammar-aware decoding beside the free decode (node, wasm)")
    bench_readings.add_argument("--set", type=Path, metavar="FILE",
                                help="one utterance a line (default: voxline/bench/sets/tuning-en.txt)")
    bench_readings.add_argument("--voices", action="append", metavar="A,B",
                                help="espeak-gb, espeak-us-f3, espeak-us-fast, hibari, hibari-fast (default: all)")
    bench_readings.add_argument("--limit", type=int, default=None, metavar="N",
                                help="only N lines of the set, spread over it")
    bench_readings.add_argument("--errors", action="store_true", help="also print every wrong or missed answer")
    bench_readings.add_argument("--noise-snr-db", type=float, default=None, metavar="DB",
                                help="also a copy of every clip with pink noise this many dB below speech")
    bench_readings.add_argument("--configs", action="append", metavar="A,B",
                                help="configurations to decode beside `grammar` (default: all; grammar, anchored, "
                                     "graph-prompt, spelled, free)")
    bench_readings.add_argument("--baseline-skills", metavar="A.yaml,B.yaml",
                                help="also decode and decide with the grammar of these skill files (baseline-grammar)")
    bench_readings.add_argument("--fit", action="store_true",
                                help="fit the command confidence (whisper.js COMMAND_CONFIDENCE_MODEL) instead")
    bench_readings.set_defaults(func=_cmd_bench)
    _add_bench_load(bench)
    _add_bench_load_page(bench)
    return parser


def _snr_db(value: str) -> float | None:
    if value.lower() == "none":
        return None
    try:
        return float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of dB or 'none', got {value!r}") from None


def _add_bench_load(bench) -> None:
    from voxline.bench import load

    bench_load = bench.add_parser(
        "load", help="N concurrent WebSocket sessions, load ramped: turns/s, P50/P95/P99, errors, knee",
        description="Closed-loop sessions over real WebSockets against a running server (--url) or one the bench "
                    "starts itself. Prints one JSON object; see voxline/bench/load.py.")
    target = bench_load.add_argument_group("server")
    target.add_argument("--url", help="ws://HOST:PORT/ws of a running server (default: start one)")
    target.add_argument("--server-pid", type=int, help="with --url: the server's PID, for its RSS")
    target.add_argument("--token", default=None, help="the server's auth token (default: $VOXLINE_AUTH_TOKEN)")
    target.add_argument("--llm", default=load.DEFAULT_LLM, help=f"own server's LLM (default {load.DEFAULT_LLM})")
    target.add_argument("--tts-engine", choices=["espeak", "hibari"], default="espeak", help="own server's TTS")
    target.add_argument("--serve-arg", action="append", metavar="ARGS",
                        help='extra `voxline serve` arguments, repeatable: --serve-arg="--workers 2"')
    target.add_argument("--compare-batching", action="store_true",
                        help="start two servers (--batching on and off), run every level on both, alternating")
    shape = bench_load.add_argument_group("load")
    shape.add_argument("--sessions", default=load.DEFAULT_SESSIONS,
                       help=f"increasing load levels, concurrent sessions (default {load.DEFAULT_SESSIONS})")
    shape.add_argument("--level-seconds", type=float, default=load.DEFAULT_LEVEL_SECONDS,
                       help="measurement window per level (default %(default)s)")
    shape.add_argument("--warmup-seconds", type=float, default=load.DEFAULT_WARMUP_SECONDS,
                       help="uncounted warm-up before each level's window (default %(default)s)")
    shape.add_argument("--duration", type=float, default=None, metavar="SECONDS",
                       help="soak: the first --sessions level for this long; first vs last window, server RSS")
    shape.add_argument("--mix", default=load.DEFAULT_MIX, help=f"turn kind weights (default {load.DEFAULT_MIX})")
    shape.add_argument("--confidence", default=load.DEFAULT_CONFIDENCE,
                       help="claimed confidence of llm turns: a value or a range like 0.3-1.0 (default %(default)s)")
    shape.add_argument("--reply-audio", action=argparse.BooleanOptionalAction, default=None,
                       help="sessions want reply audio (default: yes, unless the mix is intents only)")
    shape.add_argument("--think-ms", type=float, default=0.0, help="pause between a session's turns")
    shape.add_argument("--turns-per-session", type=int, default=0, metavar="K",
                       help="hang up and open a new session (no history) after K turns (default 0: never)")
    shape.add_argument("--uplink-frame-ms", type=int, choices=[20, 100], default=load.DEFAULT_UPLINK_FRAME_MS,
                       help="audio turns: PCM16 frame length (default %(default)s)")
    shape.add_argument("--turn-timeout", type=float, default=load.DEFAULT_TURN_TIMEOUT_S,
                       help="seconds before a turn counts as `timeout` (default %(default)s)")
    shape.add_argument("--seed", type=int, default=0, help="turn choices are deterministic for a seed")
    bench_load.add_argument("--plot", type=Path, metavar="FILE.png", help="draw latency against load, knee marked")
    bench_load.set_defaults(func=_cmd_bench)


def _add_bench_load_page(bench) -> None:
    # The choices are e2e/bench/proxy.py's PROFILES and e2e/bench/load_page.py's RETURNING_MODES, named here so
    # that --help works without the checkout (tests/test_bench_checkout.py checks they agree).
    parser = bench.add_parser(
        "load-page", help="bytes and time to ready of a first and a returning visit (demo page and widget)",
        description="Cold and warm visits in Chromium through a byte-counting proxy; see e2e/bench/load_page.py.")
    parser.add_argument("--url", help="a running server (default: start one); for the widget it must admit the host "
                                      "page's origin, http://localhost:PORT (VOXLINE_ALLOWED_ORIGINS, --host-port)")
    parser.add_argument("--host-port", type=int, help="port of the widget's host page (default: a free one)")
    parser.add_argument("--profile", choices=["50mbit-40ms"], help="throttle the link (default: loopback)")
    parser.add_argument("--page", dest="pages", action="append", choices=["demo", "widget"],
                        help="only this page (repeatable; default both)")
    parser.add_argument("--returning", choices=["same-context", "same-profile", "restart"], default="same-context",
                        help="how the returning visit is made (default: same-context, as issue 18 measured)")
    parser.add_argument("--returns", type=int, default=1, metavar="N",
                        help="returning visits one after another (default 1)")
    parser.add_argument("--top", type=int, default=12, help="resources listed per visit, biggest first")
    parser.add_argument("--resources", action="store_true", help="list every resource")
    parser.add_argument("--baseline-query", metavar="QUERY",
                        help="the demo page beside itself with these page settings ('&vx.NAME=value': the design "
                             "before), visit series alternating, times to ready by visit kind")
    parser.add_argument("--rounds", type=int, default=4, help="visit series of each side with --baseline-query")
    parser.set_defaults(func=_cmd_bench)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except VoxlineError as error:
        print(f"voxline: error [{error.code}]: {error.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
