"""The model registry: each registered model's name, Keras builder, torchvision twin, resolutions and preparation
(timm-style lookup: ``list_models("mobilenet*")``), models written in PyTorch (``torchvision:NAME``, ``timm:NAME``),
and the user's model files registered by name for this process. Nothing here imports TensorFlow or torch; the
builders are looked up by name inside the child process that needs them (:mod:`.keras_models`,
:mod:`inferbench.exporters.torch_source`)."""

from __future__ import annotations

import fnmatch
import importlib.util
from dataclasses import dataclass
from pathlib import Path

from ..base.errors import UsageError, did_you_mean
from ..base.size import Size, hw
from .modelfiles import FILE_FORMATS, ModelFile

PREPROCESSING = {
    "included": "RGB in [0, 255]; the model rescales internally",
    "unit": "RGB scaled to [0, 1] before the model; the model normalises inside",
    "tf": "RGB scaled to [-1, 1] (x / 127.5 - 1) before the model",
    "caffe": "RGB -> BGR, ImageNet mean subtracted, no scaling, before the model",
    "torch": "RGB scaled to [0, 1], then ImageNet mean and std normalised, before the model",
}


@dataclass(frozen=True)
class ModelSpec:
    name: str
    keras_builder: str | None  # attribute of keras.applications, or "module:function" (None: a model file)
    torchvision_builder: str | None  # function in torchvision.models, None if torchvision lacks it
    default_resolution: Size  # pixels a side, or "HxW" (a model file's own non-square input)
    min_resolution: int  # each side at least
    preprocessing: str  # key of PREPROCESSING
    source: ModelFile | None = None  # the user's model file, if the model is one
    family: str = ""  # the architecture family (one per family runs in the tests)
    resolution_multiple: int = 1  # the resolution must be a multiple of this (a ViT's patch size)
    packages: tuple[str, ...] = ()  # import names its builder needs besides TensorFlow and Keras
    extra: str = "tf"  # the pip extra that installs them
    task: str = "classification"  # key of registry.tasks.TASKS (a model file's: its own)
    torch_builder: str | None = None  # "torchvision:NAME" or "timm:NAME": a model written in PyTorch, the source
    square_only: bool = False  # it takes square inputs only (a ViT's position embeddings are built for one grid)
    in_graph_nms: str | None = None  # the suppression a PyTorch model's own graph holds, in a phrase: timed as is
    refused_by: tuple[tuple[str, str], ...] = ()  # (framework, why it cannot run the model) known before any export

    @property
    def graph_nms(self) -> str | None:
        """The suppression the model's own graph holds (a model file's, read from it; a PyTorch detector's), in a
        phrase; None where inferbench's shared one runs after the call, or none does."""
        return self.source.graph_nms if self.source is not None else self.in_graph_nms

    @property
    def layout(self) -> str:
        return self.source.layout if self.source else ("NCHW" if self.torch_builder else "NHWC")

    @property
    def fixed_batch(self) -> int | None:
        """The batch size its model file fixes (None: any, or not a file)."""
        return self.source.batch_size if self.source else None

    @property
    def builder_path(self) -> str:
        """Where the builder lives, for people: ``keras.applications.X``, ``module.function`` or ``torchvision:X``."""
        if self.torch_builder is not None:
            return self.torch_builder
        if self.keras_builder is None:
            return "(model file)"
        return self.keras_builder.replace(":", ".") if ":" in self.keras_builder \
            else f"keras.applications.{self.keras_builder}"

    @property
    def smallest(self) -> Size:
        """The smallest resolution the model takes (``--resolution min``)."""
        if self.source is not None:
            return self.default_resolution
        step = self.resolution_multiple
        return -(-self.min_resolution // step) * step

    def input_shape(self, batch: int, resolution: Size) -> tuple[int, int, int, int]:
        h, w = hw(resolution)
        return (batch, 3, h, w) if self.layout == "NCHW" else (batch, h, w, 3)

    def resolution(self, requested: Size | None) -> Size:
        """The size it runs at: ``requested`` (pixels a side, or "HxW") once the model takes it; one line if not."""
        res = self.default_resolution if requested is None else requested
        if self.source is not None and res != self.default_resolution:
            raise UsageError(f"{self.name} takes {self.default_resolution} px inputs (read from "
                             f"{self.source.path}); --resolution {res} does not apply")
        h, w = hw(res)
        if self.square_only and h != w:
            raise UsageError(f"{self.name} takes square inputs only; --resolution {res} does not suit it")
        if min(h, w) < self.min_resolution:
            raise UsageError(
                f"resolution {res} is too small for {self.name} (minimum {self.min_resolution} a side)"
            )
        if h % self.resolution_multiple or w % self.resolution_multiple:
            raise UsageError(f"resolution {res} does not suit {self.name}: it takes multiples of "
                             f"{self.resolution_multiple} px (its patch size)")
        return res

#: keras.applications, each as (name, builder, torchvision twin, default px, minimum px, preprocessing, family).
#: The names are the torchvision-style snake_case of the class names; the minimum is what the builder accepts
#: without ImageNet weights (75 for the Inceptions, 71 for Xception, 32 elsewhere).
_APPLICATIONS = [
    ("convnext_tiny", "ConvNeXtTiny", "convnext_tiny", 224, 32, "included", "convnext"),
    ("convnext_small", "ConvNeXtSmall", "convnext_small", 224, 32, "included", "convnext"),
    ("convnext_base", "ConvNeXtBase", "convnext_base", 224, 32, "included", "convnext"),
    ("convnext_large", "ConvNeXtLarge", "convnext_large", 224, 32, "included", "convnext"),
    ("convnext_xlarge", "ConvNeXtXLarge", None, 224, 32, "included", "convnext"),
    ("densenet121", "DenseNet121", "densenet121", 224, 32, "torch", "densenet"),
    ("densenet169", "DenseNet169", "densenet169", 224, 32, "torch", "densenet"),
    ("densenet201", "DenseNet201", "densenet201", 224, 32, "torch", "densenet"),
    *[(f"efficientnet_b{i}", f"EfficientNetB{i}", f"efficientnet_b{i}", px, 32, "included", "efficientnet")
      for i, px in enumerate((224, 240, 260, 300, 380, 456, 528, 600))],
    *[(f"efficientnet_v2_{v.lower()}", f"EfficientNetV2{v}", f"efficientnet_v2_{v.lower()}" if v in "SML" else None,
       px, 32, "included", "efficientnet_v2")
      for v, px in (("B0", 224), ("B1", 240), ("B2", 260), ("B3", 300), ("S", 384), ("M", 480), ("L", 480))],
    ("inception_resnet_v2", "InceptionResNetV2", None, 299, 75, "tf", "inception"),
    ("inception_v3", "InceptionV3", "inception_v3", 299, 75, "tf", "inception"),
    ("mobilenet", "MobileNet", None, 224, 32, "tf", "mobilenet"),
    ("mobilenet_v2", "MobileNetV2", "mobilenet_v2", 224, 32, "tf", "mobilenet"),
    ("mobilenet_v3_large", "MobileNetV3Large", "mobilenet_v3_large", 224, 32, "included", "mobilenet"),
    ("mobilenet_v3_small", "MobileNetV3Small", "mobilenet_v3_small", 224, 32, "included", "mobilenet"),
    ("nasnet_large", "NASNetLarge", None, 331, 32, "tf", "nasnet"),
    ("nasnet_mobile", "NASNetMobile", None, 224, 32, "tf", "nasnet"),
    ("resnet50", "ResNet50", "resnet50", 224, 32, "caffe", "resnet"),
    ("resnet101", "ResNet101", "resnet101", 224, 32, "caffe", "resnet"),
    ("resnet152", "ResNet152", "resnet152", 224, 32, "caffe", "resnet"),
    ("resnet50_v2", "ResNet50V2", None, 224, 32, "tf", "resnet_v2"),
    ("resnet101_v2", "ResNet101V2", None, 224, 32, "tf", "resnet_v2"),
    ("resnet152_v2", "ResNet152V2", None, 224, 32, "tf", "resnet_v2"),
    ("vgg16", "VGG16", "vgg16", 224, 32, "caffe", "vgg"),
    ("vgg19", "VGG19", "vgg19", 224, 32, "caffe", "vgg"),
    ("xception", "Xception", None, 299, 71, "tf", "xception"),
]

#: torchvision's names for the RegNets it implements (the same configurations, named by FLOPs).
_TORCHVISION_REGNETS = {"004": "400mf", "008": "800mf", "016": "1_6gf", "032": "3_2gf", "080": "8gf", "160": "16gf",
                        "320": "32gf"}

MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in [
        *[ModelSpec(name, builder, twin, px, minimum, prep, family=family)
          for name, builder, twin, px, minimum, prep, family in _APPLICATIONS],
        # Keras 2's RegNets, which Keras 3 dropped, built by inferbench.registry.builders
        *[ModelSpec(f"regnet{b}_{f}", f"inferbench.registry.builders:regnet{b}{f}",
                    f"regnet_{b}_{_TORCHVISION_REGNETS[f]}" if f in _TORCHVISION_REGNETS else None, 224, 32,
                    "included", family="regnet")
          for b in "xy" for f in ("002", "004", "006", "008", "016", "032", "040", "064", "080", "120", "160", "320")],
        ModelSpec("vgg16_bn", "inferbench.registry.builders:vgg16_bn", "vgg16_bn", 224, 32, "caffe", family="vgg"),
        ModelSpec("vit_b_16", "inferbench.registry.builders:vit_b16", "vit_b_16", 224, 32, "tf", family="vit",
                  resolution_multiple=16, packages=("keras_hub",), extra="vit", square_only=True),
    ]
}

DEFAULT_MODEL = "mobilenet_v3_large"

#: Model files of this process (``register``): the parent's from the command line, a child's from its job.
_FILES: dict[str, ModelSpec] = {}


def list_models(pattern: str = "*") -> list[str]:
    """Registered model names matching a shell-style pattern, e.g. ``list_models("mobilenet*")``."""
    return sorted(name for name in MODELS if fnmatch.fnmatch(name, pattern))


def get_model(name: str) -> ModelSpec:
    if name not in MODELS and name not in _FILES and torch_source(name) is not None:
        return torch_spec(name)
    try:
        return MODELS.get(name) or _FILES[name]
    except KeyError:
        raise UsageError(f"unknown model {name!r}{did_you_mean(name, MODELS)}; valid models: "
                         f"{', '.join(sorted(MODELS))}, torchvision:NAME, timm:NAME, or the path of "
                         f"{', '.join(FILE_FORMATS.values())}") from None


# --------------------------------------------------------------------------- models written in PyTorch
#: The libraries a PyTorch model may be named from (``--model torchvision:NAME``): the package its builder needs.
TORCH_LIBRARIES = {"torchvision": "torchvision", "timm": "timm"}
#: torchvision's semantic segmentation models (``torchvision.models.segmentation``): class scores a pixel as ``out``.
TORCHVISION_SEGMENTATION = ("deeplabv3_mobilenet_v3_large", "deeplabv3_resnet50", "deeplabv3_resnet101",
                            "fcn_resnet50", "fcn_resnet101", "lraspp_mobilenet_v3_large")
#: torchvision's detectors inferbench reads, with the preparation before the graph and their default size: SSDlite as
#: raw heads (cut before its decoding and suppression: inferbench.tasks.ssd; its transform's [0, 1] then mean 0.5,
#: std 0.5: [-1, 1]) at its fixed size; Faster R-CNN whole, its suppressions in the graph with fixed-size outputs
#: (inferbench.exporters.torch_rcnn; [0, 1]: its transform normalises and resizes inside) at its transform's size.
TORCHVISION_DETECTION = {"ssdlite320_mobilenet_v3_large": ("tf", 320),
                         "fasterrcnn_mobilenet_v3_large_320_fpn": ("unit", 320),
                         "fasterrcnn_mobilenet_v3_large_fpn": ("unit", 800)}
#: Those whose graph holds its own suppression (timed inside every call), in a phrase, and the runtimes that cannot
#: convert it, with why.
TORCHVISION_IN_GRAPH = {name: "torchvision's own two suppressions, in the graph (the region proposals' at IoU 0.7 "
                        "within a level, the detections' at IoU 0.5 within a class above a score of 0.05, 100 an "
                        "image: torchvision's settings for these models)"
                        for name in ("fasterrcnn_mobilenet_v3_large_320_fpn", "fasterrcnn_mobilenet_v3_large_fpn")}
TORCHVISION_REFUSED = (("openvino", "OpenVINO's PyTorch frontend converts no torchvision::nms (tried: openvino "
                                    "2026.4); openvino-onnx runs the model from its ONNX export"),)
#: The resolution each task's torchvision models are trained at (their weights' transforms): the default.
_TORCH_RESOLUTION = {"classification": 224, "segmentation": 520}


def torch_source(name: str) -> tuple[str, str] | None:
    """(library, model) of a PyTorch model's name, ``torchvision:NAME`` as the user types it or ``torchvision-NAME``
    as records and file names carry it; None for any other name."""
    for library in TORCH_LIBRARIES:
        for sep in (":", "-"):
            if name.startswith(library + sep) and len(name) > len(library) + 1:
                return library, name[len(library) + 1:]
    return None


def torch_spec(name: str) -> ModelSpec:
    """The model of a PyTorch name (its builder's name checked where it is built: :func:`check_torch_name`)."""
    found = torch_source(name)
    assert found is not None
    library, model = found
    task = "segmentation" if library == "torchvision" and model in TORCHVISION_SEGMENTATION else "classification"
    preparation, size = "torch", _TORCH_RESOLUTION[task]
    if library == "torchvision" and model in TORCHVISION_DETECTION:
        task, (preparation, size) = "detection", TORCHVISION_DETECTION[model]
    in_graph = TORCHVISION_IN_GRAPH.get(model) if library == "torchvision" else None
    return ModelSpec(f"{library}-{model}", None, None, size, 32, preparation,
                     family=f"{library}-{model.split('_')[0]}", packages=(TORCH_LIBRARIES[library],),
                     extra="torch" if library == "torchvision" else "timm", task=task,
                     torch_builder=f"{library}:{model}", in_graph_nms=in_graph,
                     refused_by=TORCHVISION_REFUSED if in_graph else ())


def task_of(model: str) -> str:
    """The task of a model this process knows (registered, a model file registered for the run, a PyTorch model by its
    name); classification for one it does not (a record built from a job alone)."""
    known = MODELS.get(model) or _FILES.get(model)
    if known is None and torch_source(model) is not None:
        return torch_spec(model).task
    return (known or MODELS[DEFAULT_MODEL]).task


def check_torch_name(text: str) -> str:
    """The record name of a PyTorch model named on the command line, once its library has a model of that name (the
    library imported here, once: listing its models needs it); one line otherwise."""
    found = torch_source(text)
    assert found is not None
    library, model = found
    package = TORCH_LIBRARIES[library]
    if importlib.util.find_spec(package) is None:
        extra = torch_spec(text).extra
        raise UsageError(f"--model {text} needs {package}: pip install -e \".[{extra}]\"")
    if library == "timm":
        import timm

        known = timm.list_models()
    else:
        import torchvision.models as tvm

        if model in tvm.list_models(module=tvm.detection) and model not in TORCHVISION_DETECTION:
            raise UsageError(f"--model {text}: of torchvision's detectors inferbench reads "
                             f"{', '.join(TORCHVISION_DETECTION)}; the others end in their own NMS, with outputs "
                             "whose size depends on the image (export their heads, or their NMS padded to its cap, "
                             "to ONNX and pass the file)")
        known = tvm.list_models(module=tvm) + tvm.list_models(module=tvm.segmentation) + list(TORCHVISION_DETECTION)
    if model not in known:
        raise UsageError(f"--model {text}: {library} has no model {model!r}{did_you_mean(model, known)}")
    return torch_spec(text).name


def register(*files: ModelFile) -> None:
    """Make model files known to :func:`get_model` by their names (the same file may come again: its latest options,
    such as its task, kept)."""
    for f in files:
        if f.name in MODELS:
            raise UsageError(f"model file {f.path} has the name of the registered model {f.name}: rename the file")
        known = _FILES.get(f.name)
        if known is not None and known.source is not None and known.source.path != f.path:
            raise UsageError(f"two model files are named {f.name} ({known.source.path if known.source else ''} "
                             f"and {f.path}): rename one")
        vision = f.format == "pt2" and bool(f.graph_nms)  # a program calling torchvision::nms
        _FILES[f.name] = ModelSpec(f.name, None, None, f.resolution, min(hw(f.resolution)), "included", source=f,
                                   task=f.task, refused_by=TORCHVISION_REFUSED if vision else ())


def is_model_file(text: str) -> bool:
    """Does a ``--model`` value name a file (or SavedModel folder) rather than a registered model?"""
    if text in MODELS:
        return False
    if text.endswith((".keras", ".onnx", ".pt2")) or "/" in text:
        return True
    try:
        return Path(text).is_dir()
    except OSError:  # a name longer than the file system takes is no folder
        return False
