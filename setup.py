"""Packaging for leantfx.

The repository keeps the design card's layout (``pipeline/``, ``components/``,
``serving/``, ``kubeflow/``, ``models/``, ``schemas/`` at the top level, plus
``cli/``, the front end), and each of those folders is installed as a
sub-package of ``leantfx`` so nothing generic such as ``pipeline`` lands at the
top of site-packages.
"""
import setuptools

_SUBPACKAGES = ('pipeline', 'components', 'serving', 'kubeflow', 'models',
                'schemas', 'cli')


def _packages():
  """Returns (packages, package_dir) mapping top-level folders into leantfx."""
  packages = ['leantfx'] + [
      f'leantfx.{sub}' for sub in setuptools.find_packages(where='leantfx')]
  package_dir = {'leantfx': 'leantfx'}
  for folder in _SUBPACKAGES:
    for sub in setuptools.find_packages(where=folder):
      packages.append(f'leantfx.{folder}.{sub}')
      package_dir[f'leantfx.{folder}.{sub}'] = f'{folder}/' + sub.replace(
          '.', '/')
    packages.append(f'leantfx.{folder}')
    package_dir[f'leantfx.{folder}'] = folder
  return packages, package_dir


_PACKAGES, _PACKAGE_DIR = _packages()

setuptools.setup(
    name='leantfx',
    version='0.1.0',
    description=('A TFX pipeline that trains, validates, optimizes and pushes '
                 'small, fast models to TF Serving and TFLite.'),
    python_requires='>=3.10,<3.11',
    packages=_PACKAGES,
    package_dir=_PACKAGE_DIR,
    package_data={'leantfx.schemas': ['*/*.pbtxt'],
                  # The JSON schema of the model cards (tests check them).
                  'leantfx.components.model_card': ['*.schema.json']},
    # Every Python process of the environment imports leantfx first (which
    # sets TF_USE_LEGACY_KERAS before TensorFlow loads), however it starts:
    # console script, `python -m`, a Beam SDK worker, a KFP executor.
    data_files=[('lib/python3.10/site-packages',
                 ['leantfx/leantfx-keras2.pth'])],
    include_package_data=True,
    install_requires=[
        'tfx==1.16.0',
        'tensorflow>=2.16,<2.17',
        'tf-keras>=2.16,<2.17',
        'tensorflow-model-optimization>=0.8,<0.9',
        'tensorflow-serving-api>=2.16,<2.17',
        # 2.63+ breaks tensorflow-transform 1.16's deep copy (see constraints.txt).
        'apache-beam[gcp]>=2.59,<2.63',
        'dill',
        'kfp>=2.5,<2.6',
        'keras-tuner>=1.4,<1.5',
        'palmerpenguins',
        'scikit-learn',
        'matplotlib',
        # leantfx deploy ovms checks config.json against OVMS's schema.
        'jsonschema',
        # A stopped run finds and stops every process below it
        # (leantfx/stopping.py); tfx already needs it (through portpicker).
        'psutil',
        # The REST API parses request bodies with it (serving/json_tensor.py);
        # apache-beam and tfx already need it. Pinned in constraints.txt.
        'orjson>=3.9.7,<4',
        # The gradient-boosted trees family (models/trees.py): ydf trains,
        # TF-DF's inference op runs the trees inside the SavedModel. 1.9.2 is
        # the release built against TF 2.16 (it pins tensorflow==2.16.2).
        'tensorflow-decision-forests==1.9.2',
    ],
    extras_require={
        # pytest-xdist: `make test` runs the test files on two workers (the
        # machine's two cores; a pipeline run keeps about one core busy).
        'test': ['pytest', 'pytest-xdist', 'hypothesis'],
        # The serving benchmark's baseline is the Flask app most users write,
        # under werkzeug in one process and under gunicorn with workers.
        'bench': ['flask', 'gunicorn'],
        # The x86 server runtimes the ModelOptimizer exports to beside TFLite
        # (leantfx/runtimes/openvino.py, onnx.py). An extra,
        # not install_requires, so a slim image can leave them out: the
        # optimizer then skips those runtimes and says to install this extra.
        # onnx is held at 1.16.x: later releases need protobuf>=4, and the
        # pinned TFX stack needs protobuf 3.20 (see constraints.txt).
        'runtimes': [
            'openvino==2026.4.1',
            # OpenVINO's string ops (and their TensorFlow-frontend
            # conversions) for free text and dates in a raw-column IR
            # (components/optimize/export/openvino_strings.py); its version
            # follows openvino's.
            'openvino-tokenizers==2026.4.1.0',
            'nncf==3.4.0',
            'onnxruntime==1.23.2',
            # ONNX Runtime's string kernels for free text and dates in a
            # raw-column .onnx (tf2onnx's ai.onnx.contrib opset).
            'onnxruntime-extensions==0.15.2',
            'tf2onnx==1.17.0',
            'onnx==1.16.2',
        ],
    },
    entry_points={'console_scripts': ['leantfx=leantfx.cli.main:main']},
)
