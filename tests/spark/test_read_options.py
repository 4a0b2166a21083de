"""Bad options of the read forms: one clear error naming the option, before any task runs;
and bad input does not hurt the cluster (the log reads back whole afterwards)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import trio

from tests.spark._spark import require_spark

require_spark(java=False)  # before importing walkit.spark

import walkit  # noqa: E402
from walkit.errors import ConfigurationError  # noqa: E402
from walkit.spark._options import read_options  # noqa: E402

_names = itertools.count()


def _error(action: Any) -> str:
    with pytest.raises(Exception) as info:
        action()
    return str(info.value)


def test_option_parsing_is_case_insensitive_and_names_the_option() -> None:
    url = "sqlite:///tmp/m.db"
    parsed = read_options(
        {"metadata": url, "path": "orders", "startingposition": "3:17", "SPLITENTRIES": "5"},
        streaming=False,
    )
    assert (str(parsed.starting), parsed.split_entries, parsed.log) == ("3:17:0", 5, "orders")
    assert parsed.split_record_sets == 5  # splitEntries, given, applies to both kinds
    cases = {
        "unknown option 'startPosition'": {"startPosition": "1:0"},
        "option 'startingPosition' is '3-17'": {"startingPosition": "3-17"},
        "option 'endingPosition' is 'soon'": {"endingPosition": "soon"},
        "option 'splitEntries' is '0'": {"splitEntries": "0"},
        "option 'failOnDataLoss' is 'maybe'": {"failOnDataLoss": "maybe"},
        "option 'maxRecordsPerTrigger' is for streaming reads": {"maxRecordsPerTrigger": "5"},
        "option 'ledgers' reads raw ledgers and takes no path": {"ledgers": "all"},
        "option 'startingTimestamp' is 'yesterday'": {"startingTimestamp": "yesterday"},
        "option 'startingTimestamp' is '-5'": {"startingTimestamp": "-5"},
        "both say where to start": {"startingTimestamp": "5", "startingPosition": "1:0"},
    }
    for text, extra in cases.items():
        with pytest.raises(ConfigurationError, match=text):
            read_options({"metadata": url, "path": "orders", **extra}, streaming=False)
    with pytest.raises(ConfigurationError, match="option 'ledgers' is '12,x'"):
        read_options({"metadata": url, "ledgers": "12,x"}, streaming=False)
    with pytest.raises(ConfigurationError, match="memory:// store lives in one process"):
        read_options({"metadata": "memory://x", "path": "orders"}, streaming=False)
    with pytest.raises(ConfigurationError, match="name the log to read"):
        read_options({"metadata": url}, streaming=False)
    with pytest.raises(ConfigurationError, match="'endingPosition' is for batch reads"):
        read_options({"metadata": url, "path": "o", "endingPosition": "1:0"}, streaming=True)


async def test_bad_options_through_spark(spark: Any, spark_metadata: str) -> None:
    url, name = spark_metadata, f"opts-{next(_names)}"
    async with walkit.Client.connect(url) as client:
        log = await walkit.Log.open(client, name, password=b"secret")
        async with log.writer() as w:
            await w.append_batch([b"x%d" % i for i in range(20)])
        # Truncate so that an explicit start before the truncation point is data loss.
        async with log.writer() as w:
            await w.truncate(walkit.LogPosition(2, 0))

    def read(**options: str) -> Any:
        reader = spark.read.format("walkit")
        for key, value in options.items():
            reader = reader.option(key, value)
        return reader

    def fails(reader: Any, path: str = name) -> str:
        return _error(lambda: reader.load(path).collect())

    def check() -> None:
        assert 'the option "metadata" is required' in fails(read())
        assert "not a metadata URL" in fails(read(metadata="http://x"))
        assert "unknown option 'colour'" in fails(
            read(metadata=url, password="secret", colour="red")
        )
        assert "option 'startingPosition' is 'x:y'" in fails(
            read(metadata=url, password="secret", startingPosition="x:y")
        )
        assert "no log named 'nope'" in fails(read(metadata=url), "nope")
        text = fails(read(metadata=url, password="wrong"))
        assert "wrong password" in text and "option 'password'" in text
        text = fails(read(metadata=url, password="secret", startingPosition="1:3"))
        assert "is truncated at 2:0" in text and "failOnDataLoss" in text
        assert "option 'ledgers' names ledger 999999" in fails(
            read(metadata=url, ledgers="999999"), ""
        )
        stream_text = _error(
            lambda: (
                spark.readStream.format("walkit")
                .option("metadata", url)
                .option("endingPosition", "1:0")
                .load(name)
                .writeStream.format("console")
                .start()
                .awaitTermination(60)
            )
        )
        assert "'endingPosition' is for batch reads" in stream_text
        given = fails(read(metadata=url, password="secret").schema("payload binary"))
        assert "a read has the fixed columns log, position" in given
        # failOnDataLoss=false starts at the truncation point instead.
        rows = (
            read(metadata=url, password="secret", startingPosition="1:3", failOnDataLoss="false")
            .load(name)
            .collect()
        )
        assert rows == []  # everything before 2:0 is gone, and 2 is the (empty) writer ledger

    await trio.to_thread.run_sync(check)
