"""The serdes of structured values: JSON-able objects and pydantic models, as UTF-8 JSON."""

from __future__ import annotations

import json
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from common.errors import ConfigError, SerializationError
from common.serdes_base import SerdeBase, byte_size, preview

M = TypeVar("M", bound=BaseModel)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


_JSON_ENCODE = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, sort_keys=True, separators=(",", ":")
).encode
_JSON_DECODE = json.JSONDecoder(parse_constant=_reject_constant).decode


class JsonSerde(SerdeBase):
    """Encode JSON-able objects as compact UTF-8 JSON with sorted keys (stable output)."""

    __slots__ = ()

    def serialize(self, topic: str, data: Any) -> bytes | None:
        """Return the JSON bytes; raise SerializationError if ``data`` is not JSON-able."""
        if data is None:
            return None
        try:
            return _JSON_ENCODE(data).encode("utf-8")
        except (TypeError, ValueError, RecursionError) as exc:
            raise SerializationError(
                f"JsonSerializer expected a JSON-able value, got {preview(data)}: {exc}"
            ) from exc

    def deserialize(self, topic: str, data: bytes | None) -> Any:
        """Return the parsed object; raise SerializationError on bad UTF-8 or bad JSON."""
        if data is None:
            return None
        byte_size(data, "JsonDeserializer")
        try:
            return _JSON_DECODE(str(data, "utf-8"))
        except UnicodeDecodeError as exc:
            raise SerializationError(
                f"JsonDeserializer expected UTF-8 JSON, got invalid UTF-8 at position "
                f"{exc.start} in {preview(data)}"
            ) from exc
        except (ValueError, RecursionError) as exc:
            raise SerializationError(
                f"JsonDeserializer expected valid JSON, got {preview(data)}: {exc}"
            ) from exc


class PydanticSerde(SerdeBase, Generic[M]):
    """Encode pydantic v2 models as JSON (``model_dump_json`` / ``model_validate_json``)."""

    __slots__ = ("_model",)

    def __init__(self, model_cls: type[M]) -> None:
        """Serve ``model_cls``; raise ConfigError if it is not a pydantic BaseModel."""
        if not (isinstance(model_cls, type) and issubclass(model_cls, BaseModel)):
            raise ConfigError(f"PydanticSerde needs a pydantic BaseModel class, got {model_cls!r}")
        self._model: type[M] = model_cls

    @property
    def model_cls(self) -> type[M]:
        """The pydantic model class."""
        return self._model

    def _args(self) -> tuple[object, ...]:
        return (self._model,)

    def __repr__(self) -> str:
        return f"PydanticSerde({self._model.__qualname__})"

    def serialize(self, topic: str, data: M | None) -> bytes | None:
        """Return the model's JSON bytes; raise SerializationError on other types."""
        if data is None:
            return None
        name = self._model.__qualname__
        if not isinstance(data, self._model):
            raise SerializationError(f"PydanticSerializer expected {name}, got {preview(data)}")
        try:
            return data.model_dump_json().encode("utf-8")
        except Exception as exc:
            raise SerializationError(f"PydanticSerializer could not dump {name}: {exc}") from exc

    def deserialize(self, topic: str, data: bytes | None) -> M | None:
        """Return the validated model; raise SerializationError when validation fails."""
        if data is None:
            return None
        byte_size(data, "PydanticDeserializer")
        raw = bytes(data) if isinstance(data, memoryview) else data
        try:
            return self._model.model_validate_json(raw)
        except ValidationError as exc:
            errs = exc.errors(include_url=False, include_input=False)
            where = ".".join(map(str, errs[0]["loc"])) or "<root>"
            raise SerializationError(
                f"PydanticDeserializer expected JSON for {self._model.__qualname__}, got "
                f"{preview(data)}: {len(errs)} validation error(s), first at {where}: "
                f"{errs[0]['msg']}"
            ) from exc
