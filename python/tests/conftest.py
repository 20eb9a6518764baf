"""Shared fixtures: the fathom CLI for the tests that compare with it.

FATHOM_CLI names the binary (scripts/test sets it to the build it made, so
there a missing CLI fails the run). Unset, the tests look for build*/fathom
in the repository; with none found they skip, saying so.
"""
import glob
import json
import os
import subprocess

import pytest

import fathom._lib

# A FATHOM_MINIMAL build (src/common + src/core, as on the GPU machine without
# jansson/PCRE2) has no captures, synthetic sources or evaluation.
full_library = pytest.mark.skipif(
    fathom._lib.minimal, reason="libfathom built with FATHOM_MINIMAL: no captures, synthetic sources or eval")

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def _find_cli():
    explicit = os.environ.get("FATHOM_CLI")
    if explicit:
        if not os.access(explicit, os.X_OK):
            pytest.fail(f"FATHOM_CLI={explicit} is not an executable")
        return explicit
    for path in sorted(glob.glob(os.path.join(ROOT, "build*", "fathom"))):
        if os.access(path, os.X_OK):
            return path
    pytest.skip("no fathom CLI (set FATHOM_CLI or build it in build*/)")


class Cli:
    def __init__(self, path):
        self.path = path

    def run(self, *args):
        r = subprocess.run([self.path, *map(str, args)], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, f"fathom {' '.join(map(str, args))} exited {r.returncode}: {r.stderr}"
        return r.stdout

    def json(self, *args, raw_numbers=False):
        """The command's JSON; with raw_numbers, every number as its printed text."""
        out = self.run(*args, "--json")
        if raw_numbers:
            return json.loads(out, parse_float=str, parse_int=str)
        return json.loads(out)


@pytest.fixture(scope="session")
def cli():
    return Cli(_find_cli())
