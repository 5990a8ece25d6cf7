"""Figure: the cost of one request through each runtime's servable, in-process.

What `leantfx serve` spends per request once the request is parsed: the
servable's ``run`` (for OpenVINO and ONNX, serving/runtime_servable.py on
the runtime's serving session; for TFLite its own servable). No HTTP, no
JSON: the figure isolates the runtime path, which a wrapper class could
slow down (a servable that re-sets every input tensor per call cost 2.9 ms
against 0.6 ms for a digits row: leantfx/runtimes/openvino.py's
``_BoundRequest``).

Model: a digits MLP with one input per pixel (64 [batch, 1] float inputs,
the layout of the digits pipeline's transformed features: the case where
per-input costs show), trained for a few epochs, exported by each
runtime's own export (the optimizer's: TFLite conversion, the server
runtimes' Exporters), pushed with its manifest and loaded by
serving/loading.load_servable. Each round sends CALLS batch-1 requests
(eval rows) to every runtime in turn; ROUNDS rounds, interleaved, so a
busy machine slows every runtime alike. Reported: median and best round
in requests per second, and the median's microseconds per call.

  .venv/bin/python -m benchmarks.bench_servable_calls [--calls N]
"""
import argparse
import os
import tempfile
import time

import numpy as np

from benchmarks import harness
from leantfx.components.optimize.export import runtime_variants
from leantfx.components.optimize.export import tflite as tflite_export
from leantfx.runtimes import push
from leantfx.runtimes import registry
from leantfx.runtimes import serving_export
from leantfx.serving import loading

CALLS = 2000
ROUNDS = 5
WARMUP_CALLS = 200
PIXELS = 64


def _model():
  """The digits MLP on 64 one-pixel inputs, and the scaled pixels."""
  import tf_keras  # pylint: disable=g-import-not-at-top
  from sklearn.datasets import load_digits  # pylint: disable=g-import-not-at-top
  x, y = load_digits(return_X_y=True)
  x = (x / 16.0).astype(np.float32)
  tf_keras.utils.set_random_seed(0)
  inputs = {f'pixel_{i}': tf_keras.Input(shape=(1,), name=f'pixel_{i}')
            for i in range(PIXELS)}
  hidden = tf_keras.layers.Dense(32, activation='relu')(
      tf_keras.layers.Concatenate()(list(inputs.values())))
  outputs = tf_keras.layers.Dense(10, activation='softmax',
                                  name='probabilities')(hidden)
  model = tf_keras.Model(inputs, outputs)
  model.compile('adam', 'sparse_categorical_crossentropy')
  model.fit({f'pixel_{i}': x[:, i:i + 1] for i in range(PIXELS)}, y,
            epochs=3, verbose=0)
  return model, x


def _push(runtime: str, model, workdir: str) -> str:
  """The runtime's float32 export of ``model``, pushed; the version folder."""
  out = os.path.join(workdir, f'{runtime}_float32')
  base = os.path.join(workdir, 'push', runtime)
  common = dict(source_model_uri='keras', technique_chain=[], mode='float32',
                metrics={}, clock=lambda: 1)
  if registry.get(runtime).exporter is None:
    saved = serving_export.save_serving_model(
        model, os.path.join(workdir, 'saved_model'))
    path = os.path.join(out, registry.get(runtime).model_file)
    tflite_export.export_saved_model_tflite(saved, 'float32',
                                            output_path=path)
    del common['mode']
    return push.push_tflite(path, base, 'digits', tflite_mode='float32',
                            **common).directory
  scratch = os.path.join(workdir, 'scratch')
  os.makedirs(scratch, exist_ok=True)
  runtime_variants.export(runtime, model, 'float32', None, out, 0,
                          {'scratch': scratch})
  return push.push_runtime_model(runtime, out, base, 'digits',
                                 **common).directory


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--calls', type=int, default=CALLS)
  args = parser.parse_args(argv)
  model, x = _model()
  requests = [{f'pixel_{i}': x[r:r + 1, i:i + 1] for i in range(PIXELS)}
              for r in range(args.calls)]
  runtimes = registry.installed()
  with tempfile.TemporaryDirectory(prefix='leantfx-bench-calls-') as workdir:
    served = {r: loading.load_servable('digits', 1, _push(r, model, workdir))
              for r in runtimes}
    rates = {r: [] for r in runtimes}
    try:
      for runtime, servable in served.items():
        for request in requests[:WARMUP_CALLS]:
          servable.run('serving_default', request, ['probabilities'])
      for _ in range(ROUNDS):
        for runtime, servable in served.items():
          run = servable.run
          start = time.perf_counter()
          for request in requests:
            run('serving_default', request, ['probabilities'])
          rates[runtime].append(args.calls / (time.perf_counter() - start))
    finally:
      for servable in served.values():
        servable.close()
  rows = []
  for runtime in runtimes:
    ordered = sorted(rates[runtime])
    median = ordered[len(ordered) // 2]
    rows.append({'runtime': runtime,
                 'servable': type(served[runtime]).__name__,
                 'median_req_per_s': median, 'best_req_per_s': ordered[-1],
                 'median_us_per_call': 1e6 / median})
  harness.report(
      'servable_calls', 'servable.run per batch-1 digits request, in-process',
      rows, notes=[
          f'{ROUNDS} interleaved rounds of {args.calls} calls per runtime, '
          f'after {WARMUP_CALLS} warm-up calls; 64 one-pixel float inputs, '
          'one thread per runtime.'])
  return 0


if __name__ == '__main__':
  raise SystemExit(main())
