"""RocksDB options of a store: Kafka Streams' defaults plus a config-setter hook.

Kafka Streams opens each RocksDB store with a 50 MiB LRU block cache, 4 KiB blocks, a
bloom filter, 16 MiB write buffers (3 of them) and no compression (here also: at most two
info log files of 256 KiB, a MANIFEST rolled at 16 KiB, and a bloom filter over each
memtable's whole keys), then lets the user's
``rocksdb.config.setter`` (Kafka's ``RocksDBConfigSetter``) change anything. Here the
setter is named by ``rocksdb.config.setter`` as ``pkg.module.Name`` or ``pkg.module:Name``:
a class (instantiated with no argument) or an object with
``set_config(store_name, options, configs)`` that edits the ``rocksdict.Options`` in place.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from rocksdict import BlockBasedOptions, Cache, DBCompressionType, Options

from common.errors import ConfigError

CONFIG_SETTER_KEY = "rocksdb.config.setter"

_COMPRESSIONS = {
    "none": DBCompressionType.none,
    "snappy": DBCompressionType.snappy,
    "lz4": DBCompressionType.lz4,
    "zstd": DBCompressionType.zstd,
}
# a MANIFEST entry of one live SST file (number, level, sizes, smallest and largest key,
# sequence numbers, checksums): about 100-250 bytes with short keys
_MANIFEST_BYTES_PER_FILE = 256


@runtime_checkable
class RocksDBConfigSetter(Protocol):
    """Changes the options of every RocksDB store before it is opened."""

    def set_config(self, store_name: str, options: Options, configs: Mapping[str, Any]) -> None:
        """Edit ``options`` (a ``rocksdict.Options``) for ``store_name`` in place."""
        ...


@dataclass(frozen=True, slots=True)
class RocksDBSettings:
    """The tuning knobs a store is opened with (Kafka Streams' defaults).

    Attributes:
        block_cache_bytes: LRU block cache per store.
        block_size: data block size.
        write_buffer_bytes: memtable size.
        max_write_buffers: memtables kept before writes stall.
        compression: ``none``, ``snappy``, ``lz4`` or ``zstd``.
        keep_log_files: info log files kept (the current ``LOG`` and older ones).
        max_log_file_bytes: size at which the info log rolls over.
        max_manifest_bytes: size at which the MANIFEST rolls over (at least; see
            ``manifest_bound``).
    """

    block_cache_bytes: int = 50 * 1024 * 1024
    block_size: int = 4096
    write_buffer_bytes: int = 16 * 1024 * 1024
    max_write_buffers: int = 3
    compression: str = "none"
    # RocksDB keeps 1,000 info logs (LOG, LOG.old.*) of unbounded size by default, one
    # more at every open: bounded here to half a MiB per store (a store lives for months;
    # its info log is mostly a line per snapshot, and rolls every few hours at this size)
    keep_log_files: int = 2
    max_log_file_bytes: int = 256 * 1024
    # RocksDB appends every flush and compaction to its MANIFEST until the file passes
    # max_manifest_file_size (1 GiB by default), then starts a new one holding only the
    # live files; every snapshot copies it, so a store open for months copied ever more.
    # Rolling at 16 KiB (or at four times the live files' entries for a big store, so it
    # does not roll at every flush) keeps each snapshot's manifest the size of its state;
    # a roll writes one new file of the live files' entries (a small store's: ~1 KiB,
    # every hour or so at a flush a second).
    max_manifest_bytes: int = 16 * 1024
    # A lookup of an absent key (every new key of a count, an aggregate, a join's side)
    # searches each memtable's skip list before the SST files' bloom filters; a bloom
    # filter over each memtable's keys (a tenth of its size: 1.6 MiB of 16) answers "not
    # here" at once: absent lookups 2.6x faster on a 5 M-key store, present ones unchanged.
    memtable_bloom_ratio: float = 0.1

    def manifest_bound(self, live_files: int) -> int:
        """Return the MANIFEST size to roll at for a store holding ``live_files`` SSTs."""
        return max(self.max_manifest_bytes, 4 * _MANIFEST_BYTES_PER_FILE * live_files)

    def options(self, live_files: int = 0) -> Options:
        """Return raw-mode ``rocksdict.Options`` carrying these settings.

        Args:
            live_files: SST files the store holds when opened (sizes its MANIFEST bound).

        Raises:
            ConfigError: ``compression`` is not one of the allowed names.
        """
        if self.compression not in _COMPRESSIONS:
            raise ConfigError(
                f"RocksDB compression {self.compression!r} is unknown; allowed: "
                f"{', '.join(_COMPRESSIONS)}"
            )
        opts = Options(raw_mode=True)
        opts.create_if_missing(True)
        opts.create_missing_column_families(True)
        table = BlockBasedOptions()
        table.set_block_cache(Cache(self.block_cache_bytes))
        table.set_block_size(self.block_size)
        table.set_bloom_filter(10, False)
        opts.set_block_based_table_factory(table)
        opts.set_write_buffer_size(self.write_buffer_bytes)
        if self.memtable_bloom_ratio > 0:
            opts.set_memtable_prefix_bloom_ratio(self.memtable_bloom_ratio)
            opts.set_memtable_whole_key_filtering(True)
        opts.set_max_write_buffer_number(self.max_write_buffers)
        opts.set_compression_type(_COMPRESSIONS[self.compression]())
        opts.set_keep_log_file_num(self.keep_log_files)
        opts.set_max_log_file_size(self.max_log_file_bytes)
        opts.set_max_manifest_file_size(self.manifest_bound(live_files))
        return opts


def load_config_setter(path: str) -> RocksDBConfigSetter | None:
    """Import the config setter named by ``rocksdb.config.setter``.

    Args:
        path: ``pkg.module.Name`` or ``pkg.module:Name``; empty means none.

    Returns:
        The setter object (a class is instantiated with no argument), or ``None``.

    Raises:
        ConfigError: the path cannot be imported or names no ``set_config``.
    """
    if not path:
        return None
    module_name, colon, attribute = path.partition(":")
    if not colon:
        module_name, _, attribute = path.rpartition(".")
    try:
        found: Any = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigError(
            f"{CONFIG_SETTER_KEY}: cannot import {path!r} ({exc}); give pkg.module.Name"
        ) from exc
    setter = found() if isinstance(found, type) else found
    if not isinstance(setter, RocksDBConfigSetter):
        raise ConfigError(
            f"{CONFIG_SETTER_KEY}: {path!r} has no set_config(store_name, options, configs)"
        )
    return setter


def store_options(
    store_name: str, app_config: Mapping[str, Any], *, live_files: int = 0
) -> Options:
    """Return the options to open ``store_name`` with: defaults, then the config setter.

    Args:
        store_name: the store's name, passed to the setter.
        app_config: the application's configuration (dotted keys).
        live_files: SST files already in the store's directory.

    Raises:
        ConfigError: the config setter cannot be loaded.
    """
    options = RocksDBSettings().options(live_files)
    setter = load_config_setter(str(app_config.get(CONFIG_SETTER_KEY) or ""))
    if setter is not None:
        setter.set_config(store_name, options, app_config)
    return options
