"""Cold starts: each handler imported, and imported with the runtime built as Lambda builds it
while the function initialises, each in a fresh process, against a naive handler.

The packages the layer ships, and the code asset, are copied from the venv into directories of
their own, twice: as source only (the layer as it shipped before: Lambda's read-only file system
keeps no byte code, so every cold start compiled it) and with the unchecked-hash byte code that
``infra.layer`` now compiles. The interpreter is this venv's (3.11, x86_64), not Lambda's 3.13 on
arm64; boto3 and botocore come from the venv, compiled (Lambda's runtime provides them).
"""

from __future__ import annotations

import os
import platform
import shutil
import site
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from infra.layer import (
    LAYER_REQUIREMENTS,
    PYTHON_VERSION,
    RUNTIME_PROVIDED,
    bytecode_python,
    compile_bytecode,
    stage_code,
)

Figures = dict[str, Any]
# What `python -m infra.layer` puts in the layer (boto3, botocore and s3transfer removed).
LAYER_TOP_LEVEL = ("aws_lambda_powertools", "aws_xray_sdk", "dateutil", "jmespath", "psycopg",
                   "psycopg_binary", "psycopg_binary.libs", "six.py", "typing_extensions.py",
                   "urllib3", "wrapt")
LAYER_DISTRIBUTIONS = ("aws_lambda_powertools", "aws_xray_sdk", "jmespath", "psycopg",
                       "psycopg_binary", "python_dateutil", "six", "typing_extensions", "urllib3",
                       "wrapt")
HANDLERS = ("scanner", "consumer", "redrive")
# A naive handler: Powertools' Logger, Metrics and Tracer, boto3 and psycopg imported at the
# top; at init it makes its Logger, Metrics and one boto3 client.
NAIVE_IMPORT = ("import boto3, psycopg; "
                "from aws_lambda_powertools import Logger, Metrics, Tracer; "
                "Logger(service='naive'); Metrics(namespace='naive')")
NAIVE_INIT = NAIVE_IMPORT + "; boto3.client('sqs')"
# What the deployed functions are given, less the database secret (its read is a network
# call, not measured here: DATABASE_URL stands in for it, and nothing connects at init).
LAMBDA_ENV = {
    "AWS_LAMBDA_FUNCTION_NAME": "reminders-bench", "AWS_DEFAULT_REGION": "eu-west-1",
    "AWS_REGION": "eu-west-1", "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
    "DATABASE_URL": "postgresql://bench@127.0.0.1:1/bench",
    "REMINDERS_QUEUE_URL": "https://sqs.eu-west-1.amazonaws.com/123456789012/deliveries",
    "REMINDERS_DLQ_URL": "https://sqs.eu-west-1.amazonaws.com/123456789012/dlq",
    "REMINDERS_PARKING_QUEUE_URL": "https://sqs.eu-west-1.amazonaws.com/123456789012/parking",
}
RUNS = 5
# What psycopg imports at its own import but uses only for its async classes, its version
# strings (read from the distributions' metadata) and finding a libpq that psycopg_binary
# brings along: imported first, their time is subtracted, which estimates a handler's init if
# psycopg imported them lazily (a change to psycopg itself, not made here).
PSYCOPG_EXTRAS = "import asyncio, importlib.metadata, ctypes.util, email.message"


def stage(root: Path, *, bytecode: bool) -> list[Path]:
    """The code asset and the layer's packages under ``root``: the directories to put first
    on the path, as /var/task and /opt/python are in Lambda."""
    code, layer = root / "task", root / "opt" / "python"
    stage_code(code, bytecode=False)
    layer.mkdir(parents=True)
    site_packages = Path(next(p for p in site.getsitepackages() if p.endswith("site-packages")))
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in LAYER_TOP_LEVEL:
        source = site_packages / name
        if source.is_dir():
            shutil.copytree(source, layer / name, ignore=ignore)
        elif source.is_file():
            shutil.copy2(source, layer / name)
    for dist in LAYER_DISTRIBUTIONS:
        for info in site_packages.glob(f"{dist}-*.dist-info"):
            shutil.copytree(info, layer / info.name)
    if bytecode:
        for directory in (code, layer):
            compile_bytecode(directory, sys.executable)
    return [code, layer]


def run_ms(code: str, path: list[Path], env: dict[str, str], cwd: Path,
           python: str = sys.executable) -> float:
    """One fresh process (``-B``: nothing written back, as in Lambda)."""
    timing = (f"import time; t = time.perf_counter(); {code}; "
              "print((time.perf_counter() - t) * 1000)")
    full = {**os.environ, **env, "PYTHONPATH": os.pathsep.join(map(str, path))}
    full.pop("PYTHONPYCACHEPREFIX", None)
    return float(subprocess.run([python, "-B", "-c", timing], capture_output=True,
                                text=True, check=True, env=full, cwd=cwd).stdout)


def best_ms(programs: dict[str, tuple[str, list[Path], dict[str, str]]],
            cwd: Path, python: str = sys.executable) -> dict[str, float]:
    """The fastest of RUNS processes for each program, the programs taking turns in every
    round, so a neighbour's burst of load slows all of them alike."""
    runs: dict[str, list[float]] = {key: [] for key in programs}
    for _ in range(RUNS):
        for key, (code, path, env) in programs.items():
            runs[key].append(run_ms(code, path, env, cwd, python))
    return {key: min(values) for key, values in runs.items()}


def where_from(path: list[Path], cwd: Path) -> str:
    """Which copy of the package a fresh process imports (the staged one, checked)."""
    done = subprocess.run([sys.executable, "-B", "-c", "import reminders, psycopg; "
                           "print(reminders.__file__, psycopg.__file__)"],
                          capture_output=True, text=True, check=True, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(map(str, path))})
    return done.stdout.strip()


def without_extras_programs(path: list[Path]) -> dict[str, tuple[str, list[Path], dict[str, str]]]:
    """The programs for ``without_extras_figures``: the extras alone, then before each handler."""
    programs = {"psycopg_extras_ms": (PSYCOPG_EXTRAS, path, LAMBDA_ENV)}
    for name in HANDLERS:
        programs[f"{name}_init_after_extras_ms"] = (
            f"{PSYCOPG_EXTRAS}; import functions.{name}.handler", path, LAMBDA_ENV)
    return programs


def without_extras_figures(figures: Figures) -> Figures:
    """Each handler's init less what ``PSYCOPG_EXTRAS`` cost, over the naive handler's."""
    naive, extras = figures["naive_init_ms_compiled"], figures["psycopg_extras_ms"]
    return {f"{name}_over_naive_without_psycopg_extras":
            (figures[f"{name}_init_after_extras_ms"] - extras) / naive for name in HANDLERS}


def bench_cold_start() -> Figures:
    figures: Figures = {"goal": "handler init (compiled) over naive init (compiled) <= 0.33",
                        "python": sys.version.split()[0], "runs_best_of": RUNS}
    with tempfile.TemporaryDirectory(prefix="reminders-cold-") as tmp:
        root = Path(tmp)
        paths = {"source": stage(root / "source", bytecode=False),
                 "compiled": stage(root / "compiled", bytecode=True)}
        programs: dict[str, tuple[str, list[Path], dict[str, str]]] = {}
        for variant, path in paths.items():
            assert all(str(root / variant) in f for f in where_from(path, root).split())
            programs[f"naive_import_ms_{variant}"] = (NAIVE_IMPORT, path, {})
            programs[f"naive_init_ms_{variant}"] = (NAIVE_INIT, path, LAMBDA_ENV)
            for name in HANDLERS:
                code = f"import functions.{name}.handler"
                programs[f"{name}_import_ms_{variant}"] = (code, path, {})
                programs[f"{name}_init_ms_{variant}"] = (code, path, LAMBDA_ENV)
        # The floor: what every handler needs whatever it trims (psycopg); and what the
        # handlers no longer import (boto3 and one client).
        programs["psycopg_import_ms_compiled"] = ("import psycopg", paths["compiled"], {})
        programs["boto3_import_and_client_ms"] = ("import boto3; boto3.client('sqs')", [],
                                                  LAMBDA_ENV)
        programs.update(without_extras_programs(paths["compiled"]))
        figures.update(best_ms(programs, root))
    figures.update(without_extras_figures(figures))
    figures["psycopg_over_naive"] = (figures["psycopg_import_ms_compiled"]
                                     / figures["naive_init_ms_compiled"])
    for name in HANDLERS:
        compiled, source = figures[f"{name}_init_ms_compiled"], figures[f"{name}_init_ms_source"]
        figures[f"{name}_over_naive"] = compiled / figures["naive_init_ms_compiled"]
        figures[f"{name}_import_over_naive_import"] = (figures[f"{name}_import_ms_compiled"]
                                                       / figures["naive_import_ms_compiled"])
        figures[f"{name}_compiled_over_source"] = compiled / source
        figures[f"{name}_over_naive_source"] = compiled / figures["naive_init_ms_source"]
    return figures


def bench_cold_start_runtime_python() -> Figures:
    """The same init figures with the Lambda runtime's Python (3.13), when one is found here:
    the layer's requirements installed from PyPI for this machine's architecture, as source
    and compiled by that interpreter; boto3, botocore and s3transfer apart and compiled (the
    runtime provides them). Skipped, saying why, without a 3.13 or without PyPI."""
    python = bytecode_python()
    if python is None:
        return {"skipped": f"no CPython {PYTHON_VERSION} found"}
    arch = platform.machine()
    with tempfile.TemporaryDirectory(prefix="reminders-cold313-") as tmp:
        root = Path(tmp)
        site_packages, runtime = root / "site", root / "var" / "runtime"
        tags = [f"--platform={tag}_{arch}" for tag in ("manylinux_2_28", "manylinux_2_17",
                                                         "manylinux2014")]
        done = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
             "--no-compile", *tags, "--only-binary=:all:", "--python-version", PYTHON_VERSION,
             "--implementation", "cp", "--target", str(site_packages), *LAYER_REQUIREMENTS,
             *RUNTIME_PROVIDED], capture_output=True, text=True, check=False)
        if done.returncode:
            return {"skipped": f"pip could not install the layer for {arch}: "
                               f"{done.stderr.strip().splitlines()[-1:]}"}
        runtime.mkdir(parents=True)
        for name in RUNTIME_PROVIDED:
            shutil.move(site_packages / name, runtime / name)
        compile_bytecode(runtime, python)
        paths: dict[str, list[Path]] = {}
        for variant in ("source", "compiled"):
            code, layer = root / variant / "task", root / variant / "opt" / "python"
            stage_code(code, bytecode=False)
            shutil.copytree(site_packages, layer)
            if variant == "compiled":
                for directory in (code, layer):
                    compile_bytecode(directory, python)
            paths[variant] = [code, layer, runtime]
        programs: dict[str, tuple[str, list[Path], dict[str, str]]] = {}
        for variant, path in paths.items():
            programs[f"naive_init_ms_{variant}"] = (NAIVE_INIT, path, LAMBDA_ENV)
            for name in HANDLERS:
                programs[f"{name}_init_ms_{variant}"] = (f"import functions.{name}.handler",
                                                         path, LAMBDA_ENV)
        # The floor: psycopg's own import, which every handler needs.
        programs["psycopg_import_ms_compiled"] = ("import psycopg", paths["compiled"], {})
        programs.update(without_extras_programs(paths["compiled"]))
        figures: Figures = {"python": PYTHON_VERSION, "machine": arch,
                            **best_ms(programs, root, python)}
    figures.update(without_extras_figures(figures))
    figures["psycopg_over_naive"] = (figures["psycopg_import_ms_compiled"]
                                     / figures["naive_init_ms_compiled"])
    for name in HANDLERS:
        compiled = figures[f"{name}_init_ms_compiled"]
        figures[f"{name}_over_naive"] = compiled / figures["naive_init_ms_compiled"]
        figures[f"{name}_compiled_over_source"] = compiled / figures[f"{name}_init_ms_source"]
    return figures
