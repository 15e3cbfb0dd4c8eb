"""HTTPS on the server's own listeners: llama-server's --ssl-key-file and
--ssl-cert-file. The pair is checked when the command line is read (files readable, a
key that matches its certificate), so a bad pair fails the start in one line."""

from __future__ import annotations

import ssl
from dataclasses import dataclass


class TlsError(ValueError):
    pass


@dataclass(frozen=True)
class TlsFiles:
    key_file: str
    cert_file: str

    def context(self) -> ssl.SSLContext:
        """A server context over the pair (TLS 1.2 at least, the default ciphers)."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(self.cert_file, self.key_file)
        except FileNotFoundError as exc:
            raise TlsError(f"cannot read {exc.filename or self.cert_file}: no such file") from None
        except PermissionError as exc:
            raise TlsError(f"cannot read {exc.filename or self.cert_file}: permission denied") from None
        except (ssl.SSLError, OSError) as exc:
            reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or str(exc)
            raise TlsError(f"the key {self.key_file} and certificate {self.cert_file} cannot serve TLS: {reason}") \
                from None
        return context


def tls_files(key_file: str | None, cert_file: str | None) -> TlsFiles | None:
    """None for plain HTTP; the checked pair for HTTPS; a TlsError otherwise."""
    if key_file is None and cert_file is None:
        return None
    if not key_file or not cert_file:
        raise TlsError("--ssl-key-file and --ssl-cert-file go together")
    files = TlsFiles(key_file, cert_file)
    files.context()
    return files
