"""Keras 2 in every process of the environment, however it starts.

leantfx/__init__.py is the one place TF_USE_LEGACY_KERAS is set; the .pth
file `make` installs imports leantfx at interpreter start-up, so a process
that imports TensorFlow first (a Beam SDK worker, a KFP executor, a user's
script) still gets tf_keras.
"""
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit


def test_a_bare_interpreter_gets_keras_2_before_importing_leantfx():
  env = {k: v for k, v in os.environ.items() if k != 'TF_USE_LEGACY_KERAS'}
  env['TF_CPP_MIN_LOG_LEVEL'] = '3'
  result = subprocess.run(
      [sys.executable, '-c', 'import os, tensorflow as tf; '
       'print(os.environ.get("TF_USE_LEGACY_KERAS"), tf.keras.__name__)'],
      capture_output=True, text=True, env=env, timeout=300, check=False)
  assert result.returncode == 0, result.stderr
  flag, keras = result.stdout.split()[-2:]
  assert flag == '1' and keras.startswith('tf_keras'), result.stdout
