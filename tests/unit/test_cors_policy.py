from __future__ import annotations

import pytest

from mlxcel.http.cors import CorsPolicy
from mlxcel.http.header_case import cased


@pytest.mark.parametrize("policy, origin, expected", [
    (CorsPolicy(), "https://a.example", "https://a.example"),  # '*' with credentials echoes
    (CorsPolicy(), None, None),
    (CorsPolicy(credentials=False), "https://a.example", "*"),
    (CorsPolicy(origins="localhost"), "http://localhost:5173", "http://localhost:5173"),
    (CorsPolicy(origins="localhost"), "http://[::1]:8000", "http://[::1]:8000"),
    (CorsPolicy(origins="localhost"), "http://127.0.0.1", "http://127.0.0.1"),
    (CorsPolicy(origins="localhost"), "http://localhost.evil.example", None),
    (CorsPolicy(origins="https://a.example, https://b.example"), "https://b.example", "https://b.example"),
    (CorsPolicy(origins="https://a.example"), "https://c.example", None),
])
def test_allowed_origin(policy, origin, expected):
    assert policy.allowed_origin(origin) == expected


def test_cased_names_survive_lowercasing_but_framing_headers_refuse():
    name = cased("Access-Control-Allow-Origin")
    assert name.lower() == b"Access-Control-Allow-Origin" and name == b"Access-Control-Allow-Origin"
    with pytest.raises(ValueError):
        cased("Content-Length")
