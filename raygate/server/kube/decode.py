"""LIST pages and WATCH lines decoded by msgspec straight from the API server's bytes into
the slim wire structs, never the client's model objects."""

from __future__ import annotations

from typing import Any

import msgspec

from raygate.server.kube.transport import (
    BOOKMARK,
    ERROR,
    ListPage,
    TransportError,
    WatchLine,
)
from raygate.server.wire import DECODE_ERRORS, kube


class Decoders:
    """msgspec decoders for one wire type, built once."""

    def __init__(self, wire: type[msgspec.Struct]) -> None:
        self.page = msgspec.json.Decoder(kube.ObjectList[wire])  # type: ignore[valid-type]
        self.item = msgspec.json.Decoder(wire)
        self.event = msgspec.json.Decoder(kube.WatchEvent[wire])  # type: ignore[valid-type]


class RawEvent(msgspec.Struct):
    """A watch event with its object left undecoded."""

    type: str = ""
    object: msgspec.Raw = msgspec.Raw(b"null")


RAW_PAGE = msgspec.json.Decoder(kube.ObjectList[msgspec.Raw])


RAW_EVENT = msgspec.json.Decoder(RawEvent)


META = msgspec.json.Decoder(kube.Metadata)


STATUS = msgspec.json.Decoder(kube.Status)


BOOKMARK_EVENT = msgspec.json.Decoder(kube.WatchEvent[kube.Bookmark])


API_RESOURCES = msgspec.json.Decoder(kube.ApiResourceList)


def meta_of(raw: bytes | msgspec.Raw) -> kube.ObjectMeta | None:
    try:
        return META.decode(raw).metadata
    except DECODE_ERRORS:
        return None


def decode_page(data: bytes, decoders: Decoders) -> ListPage:
    """A LIST reply; items that do not decode are set aside with their metadata."""
    try:
        page = decoders.page.decode(data)
        return ListPage(page.items or [], page.metadata.resource_version,
                        page.metadata.continue_)
    except msgspec.ValidationError:
        pass  # some item is malformed (JSON, but not as expected): one by one below
    except DECODE_ERRORS as exc:  # (ValidationError is a DecodeError: caught above)
        raise TransportError(f"LIST reply is not JSON: {exc}") from None
    try:
        raw = RAW_PAGE.decode(data)
    except DECODE_ERRORS as exc:
        raise TransportError(f"LIST reply is not a list: {exc}") from None
    items: list[Any] = []
    unreadable: list[tuple[kube.ObjectMeta | None, str]] = []
    for item in raw.items or []:
        try:
            items.append(decoders.item.decode(item))
        except DECODE_ERRORS as exc:
            unreadable.append((meta_of(item), str(exc)))
    return ListPage(items, raw.metadata.resource_version, raw.metadata.continue_, unreadable)


def decode_line(line: bytes, decoders: Decoders) -> WatchLine:
    """One watch event. An ERROR's object is a Status; an object of the watched kind that
    does not decode comes back as its metadata only."""
    try:
        event = decoders.event.decode(line)
    except msgspec.ValidationError as exc:
        try:
            head = RAW_EVENT.decode(line)
        except DECODE_ERRORS:
            raise TransportError(f"watch stream line is not an event: {exc}") from None
        if head.type == ERROR:
            return WatchLine(ERROR, status=status_of(head.object))
        if head.type == BOOKMARK:
            return bookmark_of(line)
        return WatchLine(head.type, meta=meta_of(head.object), problem=str(exc))
    except DECODE_ERRORS as exc:  # (ValidationError is a DecodeError: caught above)
        raise TransportError(f"watch stream line is not JSON: {exc}") from None
    if event.type == ERROR:
        # A Status may decode as some kinds' structs (no field of theirs clashes): read it
        # again as what it is.
        return WatchLine(ERROR, status=status_of(RAW_EVENT.decode(line).object))
    if event.type == BOOKMARK:
        return bookmark_of(line)
    return WatchLine(event.type, obj=event.object)


def bookmark_of(line: bytes) -> WatchLine:
    """A BOOKMARK read again for what only it carries (its annotations: the end of a
    streaming list's initial events); one a minute, or one a streaming list."""
    try:
        event = BOOKMARK_EVENT.decode(line)
    except DECODE_ERRORS as exc:
        raise TransportError(f"watch stream line is not a bookmark: {exc}") from None
    mark = event.object or kube.Bookmark()
    return WatchLine(BOOKMARK, obj=mark, initial_events_end=mark.initial_events_end)


def status_of(raw: bytes | msgspec.Raw) -> kube.Status:
    """The Status an API server's error reply or ERROR event carries; a body that is not
    one (a proxy's page) becomes the message."""
    try:
        return STATUS.decode(raw)
    except DECODE_ERRORS:
        return kube.Status(message=bytes(raw)[:200].decode("utf-8", "replace"))


def next_continue(data: bytes) -> str:
    """The continue token of a LIST reply, read from its head only (kube-apiserver writes
    ``metadata`` before ``items``); "" when there is none or it cannot be read there (the
    full decode still finds it: this only lets the next page be fetched early)."""
    end = data.find(b'"items":')
    if end < 0:
        return ""
    try:
        head = RAW_PAGE.decode(data[:end].rstrip(b", \n") + b"}")
    except DECODE_ERRORS:
        return ""
    return head.metadata.continue_
