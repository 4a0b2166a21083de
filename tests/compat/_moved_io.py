"""A pyiceberg FileIO that reads a lake from where it was copied: Iceberg metadata (and a log's
list of offloaded files) name every file by its absolute URI, so the golden lakes, written
under ``file:///walkit-golden/<name>``, are read from a copy by mapping that prefix. Given
to pyiceberg (and to walkit, through ``offload_catalog``) as ``py-io-impl`` with the
properties ``walkit.moved-from`` and ``walkit.moved-to``."""

from __future__ import annotations

from typing import Any

from pyiceberg.io import InputFile, OutputFile
from pyiceberg.io.pyarrow import PyArrowFile, PyArrowFileIO

FROM = "walkit.moved-from"
TO = "walkit.moved-to"


class MovedFileIO(PyArrowFileIO):
    def __init__(self, properties: Any = None) -> None:
        super().__init__(properties or {})
        self._from = str(self.properties[FROM])
        self._to = str(self.properties[TO])

    def _moved(self, location: str) -> str:
        if location.startswith(self._from):
            return self._to + location[len(self._from) :]
        return location

    def new_input(self, location: str) -> PyArrowFile:
        return super().new_input(self._moved(location))

    def new_output(self, location: str) -> PyArrowFile:
        return super().new_output(self._moved(location))

    def delete(self, location: str | InputFile | OutputFile) -> None:
        if isinstance(location, str):
            location = self._moved(location)
        super().delete(location)
