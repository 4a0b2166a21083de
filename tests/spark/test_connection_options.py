"""The connection options of the Spark source and sink, checked on the driver (no Spark
needed): every mistake names the option, no secret shows in a repr or an error, and the
session's ``spark.walkit.*`` conf fills in what a query does not give."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from tests.security.test_tls import Pki, pki
from tests.spark._spark import require_spark

require_spark(java=False)  # before importing walkit.spark

from walkit.errors import ConfigurationError  # noqa: E402
from walkit.spark._connect import Connection, connection, session_options  # noqa: E402
from walkit.spark._options import read_options  # noqa: E402
from walkit.spark._source import source_class  # noqa: E402

__all__ = ["pki"]  # the certificates of the TLS tests

SQLITE = "sqlite:///tmp/metadata.db"
ZK = "zk://127.0.0.1:2181/walkit"
TOKEN = "token-that-must-not-show"
PASSWORD = "password-that-must-not-show"


def tls(pki: Pki) -> dict[str, str]:
    return {"tls.ca": str(pki.ca), "tls.cert": str(pki.client_cert), "tls.key": str(pki.client_key)}


def refused(options: dict[str, str]) -> str:
    with pytest.raises(ConfigurationError) as info:
        connection(options)
    return str(info.value)


def test_good_options_make_the_client_arguments(pki: Pki, tmp_path: Path) -> None:
    creds = tmp_path / "zk-credentials"
    creds.write_text("walkit:zk-password\n")
    creds.chmod(0o600)
    conn = connection(
        {"metadata": ZK, "token": TOKEN, **tls(pki), "zk.credentialsFile": str(creds)}
    )
    args = conn.client_args()
    assert args["auth"].token == TOKEN
    assert (args["tls"].ca, args["tls"].cert, args["tls"].key) == (
        str(pki.ca),
        str(pki.client_cert),
        str(pki.client_key),
    )
    assert args["metadata_options"] == {"credentials_file": str(creds)}
    assert connection({"metadata": SQLITE}).client_args() == {
        "tls": None,
        "auth": None,
        "metadata_options": {},
    }
    assert connection({"metadata": SQLITE, "tls.ca": str(pki.ca)}).client_args()["tls"].cert is None


def test_each_mistake_names_its_option(pki: Pki, tmp_path: Path) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    open_creds = tmp_path / "open-credentials"
    open_creds.write_text(f"walkit:{PASSWORD}\n")
    open_creds.chmod(0o644)
    cases = {
        "options 'tls.cert' and 'tls.key' go together": {"tls.cert": str(pki.client_cert)},
        "option 'tls.key': cannot read /nope/client.key: No such file": {
            "tls.cert": str(pki.client_cert),
            "tls.key": "/nope/client.key",
        },
        "option 'tls.ca': TLS: cannot load CA file": {"tls.ca": str(junk)},
        "options 'tls.cert' and 'tls.key': TLS: cannot load certificate": {
            "tls.cert": str(junk),
            "tls.key": str(pki.client_key),
        },
        "option 'token': an auth token must be": {"token": " spaced " + TOKEN},
        "option 'zk.credentialsFile' is for a zk:// metadata URL": {
            "zk.credentialsFile": str(open_creds)
        },
    }
    for text, options in cases.items():
        message = refused({"metadata": SQLITE, **options})
        assert text in message and TOKEN not in message, message
    zk_cases = {
        "option 'zk.credentialsFile': the ZooKeeper credentials file": {
            "zk.credentialsFile": str(open_creds)
        },
        "options 'zk.tls.cert' and 'zk.tls.key' need 'zk.tls.ca'": {
            "zk.tls.cert": str(pki.client_cert),
            "zk.tls.key": str(pki.client_key),
        },
        "options 'zk.tls.cert' and 'zk.tls.key' go together": {
            "zk.tls.ca": str(pki.ca),
            "zk.tls.cert": str(pki.client_cert),
        },
        "options 'zk.tls.*': cannot load the ZooKeeper TLS CA": {"zk.tls.ca": str(junk)},
        "option 'zk.tls.ca': cannot read /nope/ca.pem": {"zk.tls.ca": "/nope/ca.pem"},
    }
    for text, options in zk_cases.items():
        message = refused({"metadata": ZK, **options})
        assert text in message and PASSWORD not in message, message


def test_secrets_never_show_in_a_repr(pki: Pki) -> None:
    raw = {"metadata": SQLITE, "path": "orders", "password": PASSWORD, "token": TOKEN, **tls(pki)}
    options = read_options(raw, streaming=False)
    session = session_options({"spark.walkit.token": TOKEN}, {"spark.walkit.token"})
    for text in (repr(options), repr(options.connection), repr(session), str(session)):
        assert TOKEN not in text and PASSWORD not in text, text
    assert "tls_cert=" in repr(options.connection)  # paths are no secrets
    # What Spark ships to the executors holds them, of course.
    assert pickle.loads(pickle.dumps(options.connection)) == options.connection
    assert options.connection.token == TOKEN


def test_the_session_conf_fills_in_and_a_query_option_wins(pki: Pki) -> None:
    conf = {
        "spark.walkit.metadata": SQLITE,
        "spark.walkit.TOKEN": TOKEN,  # Spark's conf keys are case-sensitive; these are not
        "spark.walkit.tls.ca": str(pki.ca),
        "spark.sql.shuffle.partitions": "2",  # not ours: left alone
    }
    session = session_options(conf, set(conf))
    assert dict(session.values) == {"tls.ca": str(pki.ca), "token": TOKEN, "metadata": SQLITE}
    parsed = read_options({"path": "orders"}, streaming=False, session=session)
    assert parsed.connection == Connection(SQLITE, token=TOKEN, tls_ca=str(pki.ca))
    mine = read_options({"path": "o", "token": "mine"}, streaming=False, session=session)
    assert mine.connection.token == "mine"
    with pytest.raises(ConfigurationError, match=r"unknown Spark conf 'spark\.walkit\.colour'"):
        session_options({"spark.walkit.colour": "red"})
    # A secret set on the running session only would show in Spark's job properties.
    for key in ("spark.walkit.token", "spark.walkit.password"):
        with pytest.raises(ConfigurationError, match="is set on the running session") as info:
            session_options({key: TOKEN}, set())
        assert TOKEN not in str(info.value)
        assert session_options({key: TOKEN}, None).values  # Spark Connect: cannot tell
    assert session_options({"spark.walkit.tls.ca": str(pki.ca)}, set()).values  # no secret


def test_the_registered_class_carries_the_conf() -> None:
    session = session_options({"spark.walkit.metadata": SQLITE})
    cls = source_class(True, session)
    assert cls.session == session and cls.push_filters and cls.name() == "walkit"
    assert source_class(False, session_options({})).session.values == ()
