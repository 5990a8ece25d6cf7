"""The soak bench, run for ~15 s: every kind of client meets a live server.

A short soak (benchmarks/bench_soak.py with --duration-s 15) against a real
`leantfx serve` process on loopback: the bench passes (no crash, no 500),
and each kind of client got the answers it should: good requests 200,
malformed ones 4xx, 10 MB batches 200, stretched gRPC shapes refused or
served by size, slow clients dropped at the deadline, versions swapped in,
and a truncated model.tflite copied in by hand refused while version 1
serves.
"""
import json
import os

import pytest

from benchmarks import bench_soak
from benchmarks import harness

pytestmark = pytest.mark.e2e


def test_a_short_soak_passes_and_every_client_is_answered(tmp_path,
                                                          monkeypatch):
  monkeypatch.setattr(harness, 'RESULTS_DIR', str(tmp_path))
  # Slow clients send a byte a second: their ~1 KB request would take
  # ~1,000 s, so each is dropped at the server's 10 s request deadline.
  args = bench_soak.parse_args([
      '--duration-s', '15', '--idle-s', '2', '--probe-rows', '10000',
      '--swap-every-s', '5', '--slow-clients', '4'])
  seen = bench_soak.measure(args)
  assert bench_soak.report(args, seen) == 0
  codes = seen['soak']['tally'].codes
  assert seen['soak']['crashed'] is None
  assert set(codes['good']) == {'200'}, codes['good']
  assert codes['malformed'] and set(codes['malformed']) <= {'400', '404'}
  assert set(codes['10MB batch']) == {'200'}, codes['10MB batch']
  assert set(codes['stretched gRPC']) == {'OK', 'RESOURCE_EXHAUSTED'}
  assert codes['slow client']['dropped'] >= 4
  assert seen['soak']['swaps'] >= 2
  # The truncated model.tflite copied in by hand: refused, version 1 serves.
  status = seen['soak']['truncated']['status']
  assert status['1'] == 'AVAILABLE', status
  assert status['2'].startswith('END'), status
  for probe in seen['probes'].values():
    assert probe['code'] == 200
    assert probe['status_answers'] >= 1
  with open(os.path.join(str(tmp_path), 'soak.json')) as f:
    written = json.load(f)
  assert written['rows'][0]['phase'] == 'idle'
  assert any('answers of 500: 0' in note for note in written['notes'])
