"""Fixtures for the DRA driver's tests (helpers: tests/dra_support.py)."""
from __future__ import annotations

import shutil
import tempfile

import pytest


@pytest.fixture
def short_dir():
    # unix socket paths are limited to 107 bytes: keep the directory short
    path = tempfile.mkdtemp(prefix="dra", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)
