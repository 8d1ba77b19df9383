#!/usr/bin/env python3
"""Reads a dptrain log directory's TensorBoard event file with protobuf (python3-protobuf), its
Event and Summary messages declared here from descriptors (no protoc), and checks every record:
the TFRecord framing and both CRC-32C checksums (computed here, not by dptrain), the first
record's file_version, and that each step's and each evaluation's scalars are the values of
steps.jsonl and evals.jsonl (as float32). Exit 0: all agree; 1: a difference; 77: no protobuf.

Usage: tb_events_check.py LOG_DIR
"""
import glob
import json
import math
import os
import struct
import sys

try:
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
except ImportError:
    print("tb_events_check: skipped: python3-protobuf is not installed", file=sys.stderr)
    sys.exit(77)


def messages():
    """Event and Summary as TensorFlow's event.proto and summary.proto declare the fields used
    (proto2: a field written with the value 0, as the first record's step, is kept, so every
    event re-encodes to its bytes)."""
    f = descriptor_pb2.FileDescriptorProto(name="dpt_event.proto", package="dpt_test", syntax="proto2")
    F = descriptor_pb2.FieldDescriptorProto
    value = f.message_type.add(name="Value")
    value.field.add(name="tag", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    value.field.add(name="simple_value", number=2, type=F.TYPE_FLOAT, label=F.LABEL_OPTIONAL)
    summary = f.message_type.add(name="Summary")
    summary.field.add(name="value", number=1, type=F.TYPE_MESSAGE, label=F.LABEL_REPEATED,
                      type_name=".dpt_test.Value")
    event = f.message_type.add(name="Event")
    event.field.add(name="wall_time", number=1, type=F.TYPE_DOUBLE, label=F.LABEL_OPTIONAL)
    event.field.add(name="step", number=2, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    event.field.add(name="file_version", number=3, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL,
                    oneof_index=0)
    event.field.add(name="summary", number=5, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL,
                    type_name=".dpt_test.Summary", oneof_index=0)
    event.oneof_decl.add(name="what")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    desc = pool.FindMessageTypeByName("dpt_test.Event")
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(desc)
    return message_factory.MessageFactory(pool).GetPrototype(desc)


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(path):
    data = open(path, "rb").read()
    at = 0
    while at < len(data):
        if len(data) - at < 12:
            raise ValueError("%s: a frame cut short at byte %d" % (path, at))
        (n,) = struct.unpack_from("<Q", data, at)
        (lcrc,) = struct.unpack_from("<I", data, at + 8)
        if lcrc != masked(crc32c(data[at:at + 8])):
            raise ValueError("%s: the length's CRC at byte %d is wrong" % (path, at))
        body = data[at + 12:at + 12 + n]
        (dcrc,) = struct.unpack_from("<I", data, at + 12 + n)
        if len(body) != n or dcrc != masked(crc32c(body)):
            raise ValueError("%s: the data's CRC at byte %d is wrong" % (path, at))
        yield body
        at += 16 + n


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


STEP_TAGS = {"train/loss": "loss", "train/lr": "lr", "train/grad_norm": "grad_norm",
             "perf/samples_per_sec": "samples_per_sec", "perf/step_seconds": "seconds",
             "perf/compute_seconds": "compute_seconds", "perf/exchange_seconds": "exchange_seconds",
             "perf/exposed_seconds": "exposed_seconds"}
EVAL_TAGS = {"eval/loss": "loss", "eval/accuracy": "accuracy", "eval/perplexity": "perplexity",
             "eval/auc": "auc", "eval/logloss": "logloss", "train/epoch_loss": "train_loss"}


def compare(what, scalars, line, tags):
    """The event's scalars are the line's non-null values, no more, no fewer."""
    problems = []
    want = {tag: line[key] for tag, key in tags.items()
            if line.get(key) is not None and math.isfinite(line[key])}
    if set(scalars) != set(want):
        problems.append("%s: tags %s, steps/evals lines say %s" % (what, sorted(scalars), sorted(want)))
    for tag in set(scalars) & set(want):
        if scalars[tag] != f32(want[tag]):
            problems.append("%s: %s is %r in the event, %r in the line" % (what, tag, scalars[tag], want[tag]))
    return problems


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    log = sys.argv[1]
    Event = messages()
    paths = sorted(glob.glob(os.path.join(log, "events.out.tfevents.*")))
    if len(paths) != 1:
        print("tb_events_check: %d event files in %s, expected 1" % (len(paths), log), file=sys.stderr)
        return 1
    steps = [json.loads(l) for l in open(os.path.join(log, "steps.jsonl"))]
    evals = [json.loads(l) for l in open(os.path.join(log, "evals.jsonl"))]
    events = []
    for body in records(paths[0]):
        ev = Event()
        ev.ParseFromString(body)
        if ev.SerializeToString() != body:
            print("tb_events_check: an event does not re-encode to its bytes", file=sys.stderr)
            return 1
        events.append(ev)
    problems = []
    if not events or events[0].file_version != "brain.Event:2":
        problems.append("the first record is not file_version brain.Event:2")
    step_events = [e for e in events[1:] if any(v.tag.startswith("train/l") for v in e.summary.value)]
    eval_events = [e for e in events[1:] if any(v.tag.startswith("eval/") for v in e.summary.value)]
    if len(step_events) + len(eval_events) != len(events) - 1:
        problems.append("events that are neither a step's nor an evaluation's")
    if len(step_events) != len(steps) or len(eval_events) != len(evals):
        problems.append("%d step and %d evaluation events; %d and %d lines" %
                        (len(step_events), len(eval_events), len(steps), len(evals)))
    for ev, line in zip(step_events, steps):
        if ev.step != line["step"]:
            problems.append("step event %d for line of step %d" % (ev.step, line["step"]))
        problems += compare("step %d" % line["step"], {v.tag: v.simple_value for v in ev.summary.value},
                            line, STEP_TAGS)
    for ev, line in zip(eval_events, evals):
        if ev.step != line["step"]:
            problems.append("evaluation event at step %d, line at %d" % (ev.step, line["step"]))
        problems += compare("epoch %d" % line["epoch"], {v.tag: v.simple_value for v in ev.summary.value},
                            line, EVAL_TAGS)
    walls = [e.wall_time for e in events]
    if walls != sorted(walls) or walls[0] < 1.6e9:
        problems.append("wall times out of order or not of now: %s" % walls[:3])
    for p in problems:
        print("tb_events_check: " + p, file=sys.stderr)
    if not problems:
        print("tb_events_check: %d records, %d steps, %d evaluations agree" %
              (len(events), len(steps), len(evals)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
