"""UpdateFeatures on the controller (controller/feature_admin.py): Kafka 4.x's rules, all
updates or none, the level recorded in the metadata log (and so in every image)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from controller.feature_admin import FeatureUpdate, update_features
from controller.image import MetadataImage
from controller.records import FeatureLevel

TV = "transaction.version"
DEFAULTS = {TV: 2}  # the brokers' configured level


def update(image: MetadataImage, *updates: FeatureUpdate, validate_only: bool = False) -> int:
    outcome = update_features(image, list(updates), validate_only, DEFAULTS)
    image.apply_batch(outcome.records)
    return int(outcome.response.error_code)


def test_a_downgrade_needs_a_downgrade_type_and_is_recorded() -> None:
    image = MetadataImage()
    assert update(image, FeatureUpdate(TV, 1, 1)) == ErrorCode.invalid_update_version
    assert image.features == {}
    assert update(image, FeatureUpdate(TV, 1, 2), validate_only=True) == 0
    assert image.features == {}  # validate only: nothing recorded
    assert update(image, FeatureUpdate(TV, 1, 2)) == 0
    assert image.features == {TV: 1}
    # Now 1 is the level: going up needs UPGRADE, a downgrade type is refused.
    assert update(image, FeatureUpdate(TV, 2, 2)) == ErrorCode.invalid_update_version
    assert update(image, FeatureUpdate(TV, 0, 3)) == 0
    assert image.features == {TV: 0}  # disabled, overriding the configured 2
    assert update(image, FeatureUpdate(TV, 2, 1)) == 0
    assert MetadataImage.from_records(image.snapshot()).features == {TV: 2}


def test_levels_out_of_range_unknown_features_and_types_refuse_the_whole_request() -> None:
    image = MetadataImage()
    for bad in (
        FeatureUpdate(TV, 3, 1),
        FeatureUpdate(TV, -1, 2),
        FeatureUpdate("metadata.version", 20, 1),
        FeatureUpdate(TV, 1, 7),
    ):
        assert update(image, FeatureUpdate(TV, 1, 2), bad) == ErrorCode.invalid_update_version
    assert image.features == {}
    # The same feature twice: the last update counts, as in Kafka's map.
    assert update(image, FeatureUpdate(TV, 1, 2), FeatureUpdate(TV, 2, 1)) == 0
    assert image.features == {TV: 2}


def test_a_bad_feature_level_record_does_not_fit_the_image() -> None:
    image = MetadataImage()
    try:
        image.apply(FeatureLevel(TV, -1))
    except ValueError:
        pass
    else:
        raise AssertionError("a negative level was applied")
    assert image.features == {}
