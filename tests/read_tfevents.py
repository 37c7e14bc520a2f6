#!/usr/bin/env python3
"""An independent reader of TensorBoard event files, written from the format's specification
(TFRecord: uint64 length, uint32 masked CRC32C of the length bytes, the record, uint32 masked
CRC32C of the record; each record an `Event` protocol buffer: 1 wall_time double, 2 step int64,
3 file_version string, 5 summary {1 repeated value {1 tag string, 2 simple_value float}},
6 session_log {1 status enum}). Every checksum is verified.

Usage: read_tfevents.py FILE...   prints one JSON object per event; exits 1 on a bad record."""
import json
import struct
import sys


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def fields(buf: bytes):
    """(field number, wire type, value) of a protocol buffer message."""
    pos = 0
    while pos < len(buf):
        key, pos = varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = varint(buf, pos)
        elif wire == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 2:
            length, pos = varint(buf, pos)
            value, pos = buf[pos:pos + length], pos + length
        elif wire == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            raise ValueError(f"wire type {wire}")
        yield field, wire, value


def varint(buf: bytes, pos: int):
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def events(path):
    data = open(path, "rb").read()
    pos = 0
    while pos < len(data):
        if pos + 12 > len(data):
            raise ValueError(f"{path}: truncated record header at byte {pos}")
        header = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        if masked(header) != length_crc:
            raise ValueError(f"{path}: bad length checksum at byte {pos}")
        record = data[pos + 12:pos + 12 + length]
        (data_crc,) = struct.unpack("<I", data[pos + 12 + length:pos + 16 + length])
        if len(record) != length or masked(record) != data_crc:
            raise ValueError(f"{path}: bad record checksum at byte {pos}")
        pos += 16 + length
        event = {"step": 0}
        for field, _, value in fields(record):
            if field == 1:
                event["wall_time"] = struct.unpack("<d", value)[0]
            elif field == 2:
                event["step"] = value
            elif field == 3:
                event["file_version"] = value.decode()
            elif field == 5:
                for f, _, v in fields(value):
                    if f == 1:
                        tag, simple = None, None
                        for g, _, w in fields(v):
                            if g == 1:
                                tag = w.decode()
                            elif g == 2:
                                simple = struct.unpack("<f", w)[0]
                        event.setdefault("scalars", {})[tag] = simple
            elif field == 6:
                event["session_log"] = dict((f, v) for f, _, v in fields(value))
        yield event


def main():
    try:
        for path in sys.argv[1:]:
            for event in events(path):
                print(json.dumps(event))
    except BrokenPipeError:
        pass
    except (ValueError, IndexError, struct.error) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
