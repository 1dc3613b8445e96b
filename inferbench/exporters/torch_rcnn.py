"""torchvision's Faster R-CNN as one program of fixed-size outputs: the same modules and the same arithmetic as
torchvision's own ``forward`` (its transform, backbone, region proposals, RoI pooling, box head and the suppression
after it), with every step whose size depends on the image rewritten to a fixed size, so that ``torch.export`` can
trace it with a dynamic batch and every runtime can compare it image by image.

A two-stage detector cannot be cut before its suppression, as an SSD is (:func:`.torch_source.heads`): the region
proposals that feed the second stage are themselves suppressed. So the suppression stays in the graph (ONNX's
``NonMaxSuppression`` once exported) and is timed inside every call; what changes is only how the survivors are kept:

* where torchvision drops a box (too small, below the score floor), the box keeps its place with a score of -1
  (:data:`DROPPED`, below every probability) and only the real ones reach the suppression, as in torchvision (the
  sizes the data decides, the suppression's input and output and the boxes of each pooling level, stay inside; the
  program's outputs have fixed sizes);
* the suppression runs once over the whole batch, each image's boxes (and each level's, or class's) apart by the
  coordinate offset torchvision's own ``batched_nms`` uses, and each image keeps its first survivors in score order,
  as torchvision's ``keep[:n]`` does (one call compares every image's boxes with every other's, where torchvision
  loops over the images: a cost that grows with the batch's square, small beside the network's: this program took
  0.99x and 1.02x the time of torchvision's own ``forward`` at batch 1 and 4 here, torch eager, 2-core CPU);
* an image with fewer proposals than the second stage takes gets zero boxes in their place (pooled and scored like
  the others, then dropped: a zero box decodes to a zero box, which torchvision's own size floor removes); an image
  with fewer detections than the cap gets rows of zeros (score 0, label 0: the background class, never a detection).

The outputs: ``boxes`` ``[batch, cap, 4]`` (x1, y1, x2, y2 in input pixels), ``scores`` ``[batch, cap]`` and
``labels`` ``[batch, cap]`` (COCO's category ids, 1 to 90; 0 in a padded row). A slow test holds the program to
torchvision's own ``forward``: the same detections, boxes within 0.01 px."""

from __future__ import annotations

import math
from typing import Any

from ..base.size import Size, hw

#: The score a dropped box keeps its place with: below every probability.
DROPPED = -1.0


def is_rcnn(module: Any) -> bool:
    """A torchvision two-stage detector (a region proposal network and RoI heads)."""
    return hasattr(module, "rpn") and hasattr(module, "roi_heads")


def fixed(torch: Any, rcnn: Any, resolution: Size) -> Any:
    """``rcnn`` (torchvision's ``FasterRCNN``) as a module taking a prepared batch ``[n, 3, h, w]`` in [0, 1] at
    ``resolution`` and giving its detections padded to its cap (``roi_heads.detections_per_img``)."""
    from torchvision.models.detection.image_list import ImageList

    h, w = hw(resolution)
    t = rcnn.transform
    scale = min(float(t.min_size[-1]) / min(h, w), float(t.max_size) / max(h, w))
    rh, rw = int(math.floor(h * scale)), int(math.floor(w * scale))  # interpolate's size (recompute_scale_factor)
    ph, pw = (int(math.ceil(s / 32) * 32) for s in (rh, rw))  # batch_images' padding to a multiple of 32

    class Fixed(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rcnn = rcnn
            x = torch.zeros(1, 3, ph, pw)
            with torch.no_grad():
                features = list(rcnn.backbone(x).values())
                anchors = rcnn.rpn.anchor_generator(ImageList(x, [(rh, rw)]), features)[0]
                rcnn.roi_heads.box_roi_pool(rcnn.backbone(x), [torch.zeros(1, 4)], [(rh, rw)])  # sets its scales
            self.per_level = [int(f.shape[1] * f.shape[2] * f.shape[3]) // 4 for f in
                              rcnn.rpn.head(features)[1]]  # anchors a level (4 deltas an anchor)
            self.register_buffer("anchor_boxes", anchors.float())
            self.register_buffer("mean", torch.tensor(t.image_mean).reshape(1, 3, 1, 1))
            self.register_buffer("std", torch.tensor(t.image_std).reshape(1, 3, 1, 1))
            self.register_buffer("back", torch.tensor([w / rw, h / rh, w / rw, h / rh]))

        def normed(self, x: Any) -> Any:
            """The features: the transform (normalised, resized, padded to a multiple of 32) and the backbone, where
            every batch norm of the MobileNetV3 detectors is (what their conditioning runs: their heads have none)."""
            images = torch.nn.functional.interpolate((x - self.mean) / self.std, size=None, scale_factor=scale,
                                                     mode="bilinear", recompute_scale_factor=True,
                                                     align_corners=False)
            return rcnn.backbone(torch.nn.functional.pad(images, (0, pw - rw, 0, ph - rh)))

        def forward(self, x: Any) -> Any:
            features = self.normed(x)
            proposals, valid = propose(torch, rcnn.rpn, list(features.values()), self.anchor_boxes,
                                       self.per_level, (rh, rw))
            boxes, scores, labels = detect(torch, rcnn.roi_heads, features, proposals, valid, (rh, rw))
            return {"boxes": boxes * self.back, "scores": scores, "labels": labels}

    return Fixed().eval()


def condition_heads(torch: Any, module: Any, calib: Any) -> None:
    """Seeded weights of a two-stage detector made to detect (after the batch norms are conditioned: torch_source's
    ``condition``): torch's stock initialisation gives class scores so large that one class takes every box, and box
    regressions that throw the boxes off the image. The classifiers' weights are scaled so that their logits spread
    as a trained detector's do (a standard deviation of 2 on ``calib``, the RPN's and the box predictor's alike), the
    regressions' to 0.2, their biases set to zero. A detector so conditioned finds tens of boxes an image, with
    distinct scores (ties would make the order of equal detections, not the model, decide parity)."""
    rcnn = module.rcnn
    head, predictor = rcnn.rpn.head, rcnn.roi_heads.box_predictor
    objectness, deltas = (torch.cat([t.flatten() for t in part]) for part in _seen(torch, module, head, calib))
    _spread(torch, ((head.cls_logits, objectness, 2.0), (head.bbox_pred, deltas, 0.2)))
    features = _seen(torch, module, rcnn.roi_heads.box_head, calib)  # on the proposals of the conditioned RPN
    _spread(torch, ((predictor.cls_score, predictor.cls_score(features), 2.0),
                    (predictor.bbox_pred, predictor.bbox_pred(features), 0.2)))


def _seen(torch: Any, module: Any, layer: Any, calib: Any) -> Any:
    """What ``layer`` gives when ``module`` runs on ``calib``."""
    seen: list[Any] = []

    def keep(_: Any, __: Any, out: Any) -> None:
        seen.append(out)

    hook = layer.register_forward_hook(keep)
    try:
        with torch.no_grad():
            module(calib)
    finally:
        hook.remove()
    return seen[0]


def _spread(torch: Any, targets: tuple[tuple[Any, Any, float], ...]) -> None:
    """Each layer's weights scaled so that what it gave spreads by its target (a standard deviation), its bias 0."""
    with torch.no_grad():
        for layer, values, spread in targets:
            layer.weight.mul_(spread / max(float(values.std()), 1e-12))
            layer.bias.zero_()


def first_per_image(torch: Any, image: Any, n: int, cap: int) -> Any:
    """Where each image's first ``cap`` survivors go: ``image``, the image of each of the suppression's survivors
    (in score order) among ``n`` images; gives the flat slot ``image * cap + rank`` of each survivor that fits, else
    a slot past the end (its rank within its image: a running count, ``[survivors, n]`` integers)."""
    onehot = image[:, None] == torch.arange(n, device=image.device)[None, :]
    rank = torch.cumsum(onehot.to(torch.int64), 0).gather(1, image[:, None])[:, 0] - 1
    return torch.where(rank < cap, image * cap + rank, torch.full_like(rank, n * cap))


def suppress(torch: Any, boxes: Any, scores: Any, images: Any, groups: Any, iou: float) -> Any:
    """torchvision's ``batched_nms`` over a whole batch, on the real boxes only (those torchvision keeps before it:
    a dropped box never reaches the suppression, whose cost grows with the square of what it is given): boxes of
    different ``groups`` (levels or classes) apart along x by torchvision's own offset, the largest coordinate plus
    one, and of different ``images`` apart along y by the same step (two offsets, each as small as torchvision's for
    one image: one offset for both would grow with the batch and round the coordinates it compares; the largest
    coordinate is taken over the batch, a zero where it is empty, so the program has no branch on its size). The
    survivors' indices into ``boxes``, best first."""
    real = torch.nonzero(scores > DROPPED).reshape(-1)
    boxes, scores = boxes[real], scores[real]
    step = torch.cat([boxes.reshape(-1), boxes.new_zeros(1)]).max() + 1
    across, down = groups[real].to(boxes) * step, images[real].to(boxes) * step
    shifted = boxes + torch.stack([across, down, across, down], 1)
    return real[torch.ops.torchvision.nms(shifted, scores, iou)]


def gather_kept(torch: Any, keep: Any, values: list[Any], n: int, per: int, cap: int) -> list[Any]:
    """Each image's first ``cap`` survivors of ``keep`` (indices into ``n`` images' ``per`` boxes each, flattened;
    real boxes only) as ``[n, cap, ...]`` arrays of ``values`` (the flat ones), zeros where an image has fewer."""
    slot = first_per_image(torch, torch.div(keep, per, rounding_mode="floor"), n, cap)
    out = []
    for v in values:
        flat = v.new_zeros((n * cap + 1, *v.shape[1:]))  # the last row takes what does not fit
        flat[slot] = v[keep]
        out.append(flat[: n * cap].reshape(n, cap, *v.shape[1:]))
    return out


def propose(torch: Any, rpn: Any, features: list[Any], anchors: Any, per_level: list[int],
            size: tuple[int, int]) -> tuple[Any, Any]:
    """The region proposals, ``[n, post_nms_top_n, 4]``, and which are real: torchvision's ``RegionProposalNetwork``
    (its head, its box decoding, the best ``pre_nms_top_n`` of each level, the clip, the size and score floors, the
    suppression within each level, the best ``post_nms_top_n``), every image at once."""
    from torchvision.models.detection.rpn import concat_box_prediction_layers
    from torchvision.ops import boxes as box_ops

    objectness, deltas = rpn.head(features)
    objectness, deltas = concat_box_prediction_layers(objectness, deltas)
    n = features[0].shape[0]
    decoded = rpn.box_coder.decode_single(deltas.detach(), anchors.repeat(n, 1)).reshape(n, -1, 4)
    objectness = objectness.detach().reshape(n, -1)
    tops, levels, start = [], [], 0
    for level, count in enumerate(per_level):
        k = min(int(rpn.pre_nms_top_n()), count)
        tops.append(objectness[:, start:start + count].topk(k, dim=1)[1] + start)
        levels += [level] * k
        start += count
    top = torch.cat(tops, 1)
    per = top.shape[1]
    rows = torch.arange(n, device=top.device)[:, None]
    boxes = box_ops.clip_boxes_to_image(decoded[rows, top], size).reshape(-1, 4)
    scores = torch.sigmoid(objectness[rows, top]).reshape(-1)
    wh = boxes[:, 2:] - boxes[:, :2]
    real = (wh >= rpn.min_size).all(1) & (scores >= rpn.score_thresh)
    scores = torch.where(real, scores, torch.full_like(scores, DROPPED))
    level = torch.tensor(levels, device=top.device).repeat(n)
    image = torch.div(torch.arange(n * per, device=top.device), per, rounding_mode="floor")
    keep = suppress(torch, boxes, scores, image, level, rpn.nms_thresh)
    kept, filled = gather_kept(torch, keep, [scores, boxes, torch.ones_like(scores)], n, per,
                               int(rpn.post_nms_top_n()))[1:]
    return kept, filled > 0


def pool(torch: Any, roi_pool: Any, features: dict[str, Any], proposals: Any) -> Any:
    """torchvision's ``MultiScaleRoIAlign`` on ``[n, k, 4]`` proposals: each box pooled from the level its size maps
    it to (its own level mapper and scales), every image's boxes at once."""
    from torchvision.ops import roi_align

    n, k = proposals.shape[:2]
    boxes = proposals.reshape(-1, 4)
    image = torch.arange(n, device=boxes.device).to(boxes)[:, None].expand(n, k).reshape(-1)
    rois = torch.cat([image[:, None], boxes], 1)
    levels = roi_pool.map_levels([boxes])
    x = [v for name, v in features.items() if name in roi_pool.featmap_names]
    out = x[0].new_zeros((n * k, x[0].shape[1], *roi_pool.output_size))
    for level, (feature, scale) in enumerate(zip(x, roi_pool.scales)):
        at = torch.nonzero(levels == level).reshape(-1)
        out[at] = roi_align(feature, rois[at], output_size=roi_pool.output_size, spatial_scale=scale,
                            sampling_ratio=roi_pool.sampling_ratio)
    return out


def detect(torch: Any, heads: Any, features: dict[str, Any], proposals: Any, valid: Any,
           size: tuple[int, int]) -> tuple[Any, Any, Any]:
    """torchvision's ``RoIHeads`` in inference on fixed-size proposals: the RoI pooling, the box head and predictor,
    and ``postprocess_detections`` (the decoding, the clip, a softmax, the background dropped, the score and size
    floors, the suppression within each class, the best ``detections_per_img``), every image at once."""
    from torchvision.ops import boxes as box_ops

    n, k = proposals.shape[:2]
    pooled = pool(torch, heads.box_roi_pool, features, proposals)
    logits, regression = heads.box_predictor(heads.box_head(pooled))
    classes = logits.shape[-1]
    boxes = heads.box_coder.decode_single(regression, proposals.reshape(-1, 4)).reshape(n * k, classes, 4)
    boxes = box_ops.clip_boxes_to_image(boxes, size)[:, 1:].reshape(-1, 4)
    scores = torch.softmax(logits, -1)[:, 1:].reshape(-1)
    labels = torch.arange(1, classes, device=logits.device).repeat(n * k)
    wh = boxes[:, 2:] - boxes[:, :2]
    proposed = valid.reshape(-1, 1).expand(-1, classes - 1).reshape(-1)  # a padded proposal's boxes are not real
    real = (scores > heads.score_thresh) & (wh >= 1e-2).all(1) & proposed
    scores = torch.where(real, scores, torch.full_like(scores, DROPPED))
    per = k * (classes - 1)
    image = torch.div(torch.arange(n * per, device=logits.device), per, rounding_mode="floor")
    keep = suppress(torch, boxes, scores, image, labels, heads.nms_thresh)
    scores, boxes, labels = gather_kept(torch, keep, [scores, boxes, labels], n, per, int(heads.detections_per_img))
    return boxes, scores, labels
