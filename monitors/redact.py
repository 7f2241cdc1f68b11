"""Credentials inside URLs, never shown, logged or recorded.

A server's URL may carry its secret (`https://user:key@host`, or a token as the user name:
`https://TOKEN@host`), and so may a Prometheus URL. Every URL tokentop shows, logs, records or
writes to a file goes through `redact` first, as does free text that may quote one (a library's
exception message). The request itself still uses the URL as given.
"""

from __future__ import annotations

import re

HIDDEN = "***"
# scheme://user[:password]@ — the user part stops at the first of / ? # @ : or whitespace, the
# password at the last @ before the path (as urlsplit reads it: an unescaped @ in a password).
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^/?#@\s:]*)(?::(?P<password>[^/?#\s]*))?@")


def _hide(m: re.Match) -> str:
    if m["password"] is not None:  # user:password — the user name says whose, the password is the secret
        return f"{m['scheme']}{m['user']}:{HIDDEN}@"
    return f"{m['scheme']}{HIDDEN}@"  # a lone user name is a token


def redact(text: str) -> str:
    """`text` (a URL, or any text with URLs in it) with each URL's password, or lone user name, as ***."""
    return _USERINFO.sub(_hide, text) if "@" in text else text
