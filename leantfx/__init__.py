"""leantfx: a TFX pipeline that ships small, fast, validated models.

tfmot and every model here need Keras 2 (``tf_keras``). TensorFlow decides which
Keras ``tf.keras`` means when ``tf.keras`` is first touched, so the default is
put in place here, the one place it is set. ``leantfx-keras2.pth`` (installed
into the environment by ``make`` and the Kubeflow image) imports this package
at interpreter start-up, so every process gets it before TensorFlow loads:
the console script, ``python -m``, Beam SDK workers, KFP executors, tests.
"""
import os

os.environ.setdefault('TF_USE_LEGACY_KERAS', '1')

__version__ = '0.1.0'
