"""Spark on a secured cluster: bookie processes that serve TLS only, require client
certificates and a token, on a ZooKeeper that serves TLS only (client certificates required)
with digest ACLs on every node. Batch write, batch read and stream read with the options and
with the session's ``spark.walkit.*`` conf; a missing or wrong credential is one error naming
the option; no secret shows in Spark's plans, its event log (what its UI shows) or errors."""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from tests._cluster import process_cluster
from tests._zookeeper import (
    ServerTls,
    ZkPki,
    ZooKeeperServer,
    make_pki,
    missing_zookeeper,
    running_zookeeper,
)
from tests.security.test_tls import Pki, pki
from tests.security.test_zookeeper_acl import credentials as private_file
from tests.spark._spark import require_spark

require_spark(java=False)  # before importing walkit.spark

import walkit  # noqa: E402
import walkit.spark  # noqa: E402
from walkit.errors import ConfigurationError  # noqa: E402
from walkit.spark import CONF_PREFIX  # noqa: E402

__all__ = ["pki"]  # the bookies' certificates, from the TLS tests

pytestmark = [pytest.mark.zookeeper, pytest.mark.processes]

TOKEN = "spark-token-7f3a9c"
WRONG_TOKEN = "not-the-token-41d2"
ZK_PASSWORD = "zk-digest-5b8e"
LOG_PASSWORD = "ledger-password-c0d9"
WORKER_TOKEN = "autorecovery-token-e6f1"
SECRETS = (TOKEN, WRONG_TOKEN, ZK_PASSWORD, LOG_PASSWORD)

_names = itertools.count()


def unique(prefix: str) -> str:
    return f"{prefix}-secure-{next(_names)}"


class Secured:
    """The cluster and every option a client needs to reach it."""

    def __init__(self, zk: ZooKeeperServer, zk_pki: ZkPki, pki: Pki, creds: Path) -> None:
        self.url = zk.url("/walkit-spark").partition("?")[0]  # the options carry the rest
        self.zk_pki, self.pki, self.creds = zk_pki, pki, creds

    @property
    def store_url(self) -> str:
        """The URL with the metadata store's own options (for bookies and plain clients)."""
        p = self.zk_pki
        return (
            f"{self.url}?credentials_file={self.creds}&tls_ca={p.ca}&tls_cert={p.client_cert}"
            f"&tls_key={p.client_key}"
        )

    def options(self, **changes: str | None) -> dict[str, str]:
        """The Spark options (``None`` in ``changes`` leaves one out)."""
        options = {
            "metadata": self.url,
            "token": TOKEN,
            "tls.ca": str(self.pki.ca),
            "tls.cert": str(self.pki.client_cert),
            "tls.key": str(self.pki.client_key),
            "zk.credentialsFile": str(self.creds),
            "zk.tls.ca": str(self.zk_pki.ca),
            "zk.tls.cert": str(self.zk_pki.client_cert),
            "zk.tls.key": str(self.zk_pki.client_key),
        }
        options.update(changes)  # type: ignore[arg-type]
        return {key: value for key, value in options.items() if value is not None}

    def client(self) -> Any:
        return walkit.Client.connect(
            self.store_url, tls=self.pki.client(), auth=walkit.TokenAuth(token=TOKEN)
        )


@pytest.fixture(scope="module")
def secured(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    problem = missing_zookeeper(netty=True)
    if problem:
        pytest.fail(problem, pytrace=False)
    root = tmp_path_factory.mktemp("secure-spark")
    zk_pki = make_pki(root / "zk-pki")
    creds = Path(private_file(root, f"walkit:{ZK_PASSWORD}\n"))
    tokens = private_file(root, f"spark:{TOKEN}\nautorecovery:{WORKER_TOKEN}\n", "tokens")
    worker = private_file(root, WORKER_TOKEN + "\n", "autorecovery-token")
    args = [
        *pki.bookie_args("require"),
        "--auth", "token", "--auth-token-file", tokens,
        "--autorecovery-token-file", worker,
    ]  # fmt: skip
    with running_zookeeper(root / "zk", ServerTls(zk_pki)) as zk:
        cluster = Secured(zk, zk_pki, pki, creds)
        with process_cluster(cluster.store_url, root, 3, extra_args=args):
            yield cluster


def reader(spark: Any, options: dict[str, str], stream: bool = False) -> Any:
    source = (spark.readStream if stream else spark.read).format("walkit")
    for key, value in options.items():
        source = source.option(key, value)
    return source


def plain_read(cluster: Secured, name: str) -> list[tuple[str, bytes]]:
    async def main() -> list[tuple[str, bytes]]:
        async with cluster.client() as client:
            log = await walkit.Log.open(client, name, create=False, password=LOG_PASSWORD.encode())
            return [(str(r.position), r.payload) async for r in log.reader(follow=False)]

    return trio.run(main)


def error_text(action: Any) -> str:
    with pytest.raises(Exception) as info:
        action()
    return str(info.value)


def events(event_log: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in event_log.rglob("events_*"))


def assert_no_secret(event_log: Path, *texts: str) -> None:
    """No secret in ``texts`` (plans, progress, errors) nor in Spark's event log, which holds
    what its UI shows: the SQL tab's plans and node details, jobs, stages and the
    environment."""
    logged = events(event_log)
    assert "SparkListenerSQLExecutionStart" in logged  # the queries are in it
    for text in (logged, *texts):
        for secret in SECRETS:
            assert secret not in text


# Spark calls stay on the main thread: a write from another thread does not find the format
# (Spark looks Python data sources up in the thread's active session).


def test_write_then_batch_and_stream_read(
    spark: Any,
    spark_event_log: Path,
    secured: Secured,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    name = unique("orders")
    options = secured.options(password=LOG_PASSWORD)
    df = spark.range(0, 40, numPartitions=2).selectExpr(
        "CAST(format_string('order-%02d', id) AS BINARY) AS payload"
    )
    writer = df.write.format("walkit").mode("append")
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.save(name)
    expected = plain_read(secured, name)
    assert [payload for _, payload in expected] == [b"order-%02d" % i for i in range(40)]

    read = reader(spark, options).load(name).select("position", "payload")
    batch = read.collect()
    assert [(r.position, bytes(r.payload)) for r in batch] == expected

    out = tmp_path / "stream"
    stream = reader(spark, options, stream=True).option("maxRecordsPerTrigger", "15").load(name)
    query = (
        stream.select("position", "payload")
        .writeStream.format("json")
        .option("path", str(out))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    streamed = spark.read.schema("position string, payload binary").json(str(out)).collect()
    assert sorted((r.position, bytes(r.payload)) for r in streamed) == sorted(expected)

    for mode in ("extended", "formatted", "cost", "codegen"):
        read.explain(mode)
    stream.explain(True)
    query.explain(True)
    shown = capsys.readouterr().out
    assert "BatchScan walkit" in shown
    progress = json.dumps(query.recentProgress, default=str)
    assert '"numInputRows": 15' in progress
    assert_no_secret(spark_event_log, shown, progress)


def test_missing_or_wrong_credentials_name_the_option(
    spark: Any, spark_event_log: Path, secured: Secured
) -> None:
    name = unique("refusals")

    async def make() -> None:
        async with secured.client() as client:
            log = await walkit.Log.open(client, name, password=LOG_PASSWORD.encode())
            async with log.writer() as w:
                await w.append_batch([b"r%d" % i for i in range(10)])

    trio.run(make)
    pki, zk_pki = secured.pki, secured.zk_pki

    def read(**changes: str | None) -> str:
        options = secured.options(password=LOG_PASSWORD, **changes)
        return error_text(lambda: reader(spark, options).load(name).collect())

    def write(**changes: str | None) -> str:
        writer = spark.range(3).selectExpr("CAST(id AS STRING) AS payload").write.format("walkit")
        for key, value in secured.options(password=LOG_PASSWORD, **changes).items():
            writer = writer.option(key, value)
        return error_text(lambda: writer.mode("append").save(name))

    cert = {"tls.cert": str(pki.stranger_cert), "tls.key": str(pki.stranger_key)}
    # Where each surfaces: the log's ledgers are closed, so the driver plans from the
    # metadata store alone and the bookies refuse the tasks; the store refuses the driver.
    cases = {
        "AuthenticationError: walkit: the bookies require a token: give the option 'token'": (
            read(token=None)
        ),
        "AuthenticationError: walkit: option 'token': ": read(token=WRONG_TOKEN),
        "TLSError: walkit: the bookies serve TLS: give the options 'tls.ca', 'tls.cert' and "
        "'tls.key'": read(**{"tls.ca": None, "tls.cert": None, "tls.key": None}),
        "TLSError: walkit: options 'tls.cert' and 'tls.key': ": read(
            **{"tls.cert": None, "tls.key": None}
        ),
        "TLSError: walkit: options 'tls.cert' and 'tls.key': ...": read(**cert),
        "TLSError: walkit: option 'tls.ca': ": read(**{"tls.ca": str(pki.other_ca)}),
        "ConfigurationError: walkit: option 'tls.cert': cannot read /nonexistent/c.pem": read(
            **{"tls.cert": "/nonexistent/c.pem"}
        ),
        "MetadataAccessError: walkit: option 'zk.credentialsFile': ": read(
            **{"zk.credentialsFile": None}
        ),
        "MetadataAccessError: walkit: option 'zk.tls.ca': ": read(
            **{"zk.tls.ca": str(zk_pki.other_ca)}
        ),
        "AuthenticationError: walkit: option 'token': ....": write(token=WRONG_TOKEN),
    }
    for expected, text in cases.items():
        assert expected.rstrip(".") in text, text
        # One error: a Python traceback ending in walkit's error, no Java stack trace.
        assert len(re.findall(r"^walkit\.errors\.\w+: ", text, re.MULTILINE)) == 1, text
        assert "\tat org.apache" not in text and "Py4JJavaError" not in text, text
    assert_no_secret(spark_event_log, *cases.values())
    # Nothing was written by the refused write, and the log reads back whole.
    assert len(plain_read(secured, name)) == 10


def test_session_conf_gives_the_options_and_a_query_option_wins(
    spark: Any, spark_event_log: Path, secured: Secured
) -> None:
    name = unique("conf")
    conf = {
        CONF_PREFIX + key: value for key, value in secured.options(password=LOG_PASSWORD).items()
    }
    secrets = [CONF_PREFIX + "token", CONF_PREFIX + "password"]
    typo = CONF_PREFIX + "tls.cer"
    # The application's SparkConf, as spark-submit --conf fills it at start (the shared
    # session is running: its live SparkConf stands in; Spark redacts the keys it holds).
    startup = spark.sparkContext._jsc.sc().conf()
    try:
        for key, value in conf.items():
            spark.conf.set(key, value)
        with pytest.raises(ConfigurationError, match=r"'spark\.walkit\.password' is set on"):
            walkit.spark.register(spark)  # a secret set on the running session only
        for key in secrets:
            startup.set(key, conf[key])
        spark.conf.set(typo, "/x.pem")
        with pytest.raises(ConfigurationError, match=re.escape(f"unknown Spark conf '{typo}'")):
            walkit.spark.register(spark)
        spark.conf.unset(typo)
        walkit.spark.register(spark)  # reads the conf
        df = spark.range(5).selectExpr("CAST(id AS STRING) AS payload")
        df.write.format("walkit").mode("append").save(name)  # no option at all
        rows = spark.read.format("walkit").load(name).select("payload").collect()
        text = error_text(
            lambda: spark.read.format("walkit").option("token", WRONG_TOKEN).load(name).collect()
        )
    finally:
        for key in [*conf, typo]:
            spark.conf.unset(key)
        for key in secrets:
            startup.remove(key)
        walkit.spark.register(spark)  # as the session fixture registered it
    assert [bytes(r.payload) for r in rows] == [b"0", b"1", b"2", b"3", b"4"]
    assert "AuthenticationError: walkit: option 'token': " in text  # the query's option won
    # The log was made with the conf's password.
    assert [payload for _, payload in plain_read(secured, name)] == [b"%d" % i for i in range(5)]
    assert '"spark.walkit.token":' in events(spark_event_log)  # the jobs' properties have it
    assert_no_secret(spark_event_log, text)
