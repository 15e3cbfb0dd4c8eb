"""`serve` flags for HTTPS on the server's own listeners: llama-server's --ssl-key-file
and --ssl-cert-file. The pair is checked when the command line is read (files
readable, a key that matches its certificate), so a bad pair fails the start in one
line; uvicorn loads it again to serve."""

from __future__ import annotations

import ssl

from mlxcel.config import TlsFiles


class TlsError(ValueError):
    pass


def _check(files: TlsFiles) -> None:
    """Load the pair as a server would (TLS 1.2 at least), or raise a TlsError."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(files.cert_file, files.key_file)
    except FileNotFoundError as exc:
        raise TlsError(f"cannot read {exc.filename or files.cert_file}: no such file") from None
    except PermissionError as exc:
        raise TlsError(f"cannot read {exc.filename or files.cert_file}: permission denied") from None
    except (ssl.SSLError, OSError) as exc:
        reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or str(exc)
        raise TlsError(f"the key {files.key_file} and certificate {files.cert_file} cannot serve TLS: {reason}") \
            from None


def tls_files(key_file: str | None, cert_file: str | None) -> TlsFiles | None:
    """None for plain HTTP; the checked pair for HTTPS; a TlsError otherwise."""
    if key_file is None and cert_file is None:
        return None
    if not key_file or not cert_file:
        raise TlsError("--ssl-key-file and --ssl-cert-file go together")
    files = TlsFiles(key_file, cert_file)
    _check(files)
    return files
