"""Framing, request headers, tagged-field skipping, response encoding."""

from __future__ import annotations

import datetime
import struct
import uuid

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.serial import entity_reader, entity_writer

from protocol.build import build, error_response
from protocol.codec import (
    MalformedRequest,
    RecordChunks,
    decode_body,
    encode_response,
    parse_request_header,
)
from protocol.framing import FrameDecoder, FrameTooLarge


class _Collect(list):
    write = list.append


def _encode(entity: object) -> bytes:
    out = _Collect()
    entity_writer(type(entity))(out, entity)
    return b"".join(out)


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


# -- framing ---------------------------------------------------------------


def test_frames_split_across_reads_are_reassembled() -> None:
    decoder = FrameDecoder(1024)
    stream = _frame(b"first") + _frame(b"") + _frame(b"third-frame")
    frames: list[bytes] = []
    for i in range(len(stream)):  # one byte at a time: the worst case
        frames += [bytes(f) for f in decoder.feed(stream[i : i + 1])]
    assert frames == [b"first", b"", b"third-frame"]


def test_whole_frames_in_one_read_are_views_into_it() -> None:
    decoder = FrameDecoder(1024)
    data = _frame(b"abc") + _frame(b"de")
    frames = decoder.feed(data)
    assert [bytes(f) for f in frames] == [b"abc", b"de"]
    assert all(f.obj is data for f in frames)  # no copy


@pytest.mark.parametrize("size", [2**31 - 1, -1, 1025])
def test_oversized_or_negative_frame_is_refused(size: int) -> None:
    decoder = FrameDecoder(1024)
    with pytest.raises(FrameTooLarge):
        decoder.feed(struct.pack(">i", size) + b"x")


# -- headers and bodies ----------------------------------------------------


def _request(api_key: int, version: int, body: object, client_id: str | None = "cli") -> bytes:
    schema = load_request_schema(api_key, version)
    header_type = schema.__header_schema__
    header = header_type(
        request_api_key=api_key,
        request_api_version=version,
        correlation_id=42,
        client_id=client_id,
    )
    return _encode(header) + _encode(body)


def test_header_v2_and_body_decode() -> None:
    body = MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=None, name="t"),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    raw = memoryview(_request(3, 12, body))
    header, offset = parse_request_header(raw)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (
        3,
        12,
        42,
        "cli",
    )
    decoded = decode_body(MetadataRequest, raw, offset)
    assert decoded.topics[0].name == "t"
    assert decoded.allow_auto_topic_creation is False


def test_header_v1_with_null_client_id() -> None:
    schema = load_request_schema(3, 4)
    body = schema(topics=None, allow_auto_topic_creation=True)
    header, _offset = parse_request_header(memoryview(_request(3, 4, body, client_id=None)))
    assert header.client_id is None and header.api_version == 4


def test_unknown_tagged_fields_are_skipped_in_header_and_body() -> None:
    body = MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=None, name="orders"),),
        allow_auto_topic_creation=True,
        include_topic_authorized_operations=False,
    )
    raw = bytearray(_request(3, 12, body))
    # Header tagged fields: the header ends after client id "cli" (2+3 bytes at offset 8).
    header_end = 8 + 2 + 3
    assert raw[header_end] == 0
    raw[header_end : header_end + 1] = b"\x01\x07\x02zz"  # one unknown tag (7), 2 bytes
    # Body: the last byte is the top-level tagged-field count (0) -> add unknown tag 9.
    assert raw[-1] == 0
    raw[-1:] = b"\x02\x09\x01q\x0b\x00"
    # And inside the nested topic entry, whose tag count is the byte before the array end.
    view = memoryview(bytes(raw))
    header, offset = parse_request_header(view)
    assert header.correlation_id == 42
    with pytest.raises(KeyError):
        entity_reader(MetadataRequest)(view, offset)  # kio itself refuses
    decoded = decode_body(MetadataRequest, view, offset)
    assert decoded.topics[0].name == "orders"
    assert decoded.allow_auto_topic_creation is True


def test_unknown_tag_inside_nested_entity_is_skipped() -> None:
    body = MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=None, name="ab"),),
        allow_auto_topic_creation=True,
        include_topic_authorized_operations=False,
    )
    encoded = bytearray(_encode(body))
    # Layout: array len(1) | uuid(16) | name len(1) "ab" | topic tags(1) | bool | bool | tags
    topic_tags = 1 + 16 + 1 + 2
    assert encoded[topic_tags] == 0
    encoded[topic_tags : topic_tags + 1] = b"\x01\x05\x03abc"
    decoded = decode_body(MetadataRequest, memoryview(bytes(encoded)), 0)
    assert decoded.topics[0].name == "ab"


def test_garbage_body_is_malformed() -> None:
    schema = load_request_schema(3, 12)
    header = _request(
        3,
        12,
        schema(
            topics=None, allow_auto_topic_creation=True, include_topic_authorized_operations=False
        ),
    )
    raw = memoryview(header[:14] + b"\xff\xff\xff\xff\xff\xff")
    _parsed, offset = parse_request_header(raw)
    with pytest.raises(MalformedRequest):
        decode_body(schema, raw, offset)


def test_truncated_header_is_malformed() -> None:
    with pytest.raises(MalformedRequest):
        parse_request_header(memoryview(b"\x00\x03\x00"))
    with pytest.raises(MalformedRequest):  # client id length beyond the frame
        parse_request_header(memoryview(struct.pack(">hhih", 3, 4, 1, 50) + b"ab"))


# -- responses -------------------------------------------------------------


def test_response_header_versions() -> None:
    v0 = build(load_response_schema(18, 3), {"api_keys": [], "throttle_time": 0})
    frame = b"".join(encode_response(7, v0))
    size, corr = struct.unpack_from(">ii", frame)
    assert corr == 7 and size == len(frame) - 4
    # ApiVersions answers always use header v0: the body starts right after the id.
    assert frame[8:10] == b"\x00\x00"  # error code NONE

    flexible = build(load_response_schema(3, 12), {"brokers": [], "topics": []})
    frame = b"".join(encode_response(9, flexible))
    assert struct.unpack_from(">i", frame, 4)[0] == 9
    assert frame[8] == 0  # header v1: empty tagged fields
    decoded, _ = entity_reader(type(flexible))(memoryview(frame), 9)
    assert decoded == flexible


def test_record_chunks_are_spliced_without_joining() -> None:
    schema = load_response_schema(1, 12)
    big = memoryview(b"R" * 100_000)
    records = RecordChunks([b"head", big], 4 + len(big))
    response = build(
        schema,
        {
            "responses": [
                {
                    "topic": "t",
                    "partitions": [{"partition_index": 0, "high_watermark": 5, "records": records}],
                }
            ]
        },
    )
    pieces = encode_response(1, response)
    assert any(p is big for p in pieces)  # passed through, not copied
    frame = b"".join(pieces)
    assert struct.unpack_from(">i", frame)[0] == len(frame) - 4
    decoded, _ = entity_reader(schema)(memoryview(frame), 9)
    assert decoded.responses[0].partitions[0].records == b"head" + bytes(big)


def test_build_fills_defaults_and_converts() -> None:
    schema = load_response_schema(0, 9)
    response = build(
        schema,
        {
            "responses": [
                {
                    "name": "t",
                    "partition_responses": [
                        {"index": 1, "error_code": 2, "base_offset": 10, "log_append_time": -1}
                    ],
                    "ignored": "fields a version lacks are dropped",
                }
            ],
            "throttle_time": 5,
        },
    )
    part = response.responses[0].partition_responses[0]
    assert part.error_code is ErrorCode.corrupt_message
    assert part.log_append_time is None
    assert part.log_start_offset == -1  # schema default
    assert response.throttle_time == datetime.timedelta(milliseconds=5)


def test_error_response_sets_every_top_level_error() -> None:
    schema = load_response_schema(60, 0)
    response = error_response(schema, ErrorCode.unsupported_version)
    assert response.error_code is ErrorCode.unsupported_version
    assert response.brokers == ()


def test_build_uuid_from_string() -> None:
    schema = load_response_schema(3, 12)
    tid = uuid.uuid4()
    response = build(schema, {"topics": [{"name": "x", "topic_id": str(tid), "partitions": []}]})
    assert response.topics[0].topic_id == tid
