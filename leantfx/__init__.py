"""leantfx: a TFX pipeline that ships small, fast, validated models.

tfmot and every model here need Keras 2 (``tf_keras``). TensorFlow decides which
Keras ``tf.keras`` means when ``tf.keras`` is first touched, so the default is
put in place as soon as this package is imported; entry points (the CLI, the
tests' conftest, the Kubeflow image) set it before anything imports TensorFlow.
"""
import os

os.environ.setdefault('TF_USE_LEGACY_KERAS', '1')

__version__ = '0.1.0'
