import numpy as np
import pytest

from diffusion_policy_ros.perception.image_decoding import (
    FrameRejected,
    RawImage,
    decode_color,
    decode_depth,
)

RNG = np.random.default_rng(0)


def padded(rows: np.ndarray, pad: int) -> tuple[bytes, int]:
    h, row_bytes = rows.shape
    out = np.full((h, row_bytes + pad), 0xAB, dtype=np.uint8)
    out[:, :row_bytes] = rows
    return out.tobytes(), row_bytes + pad


@pytest.mark.parametrize("encoding,order", [("bgra8", (2, 1, 0, 3)), ("bgr8", (2, 1, 0)),
                                             ("rgb8", (0, 1, 2)), ("rgba8", (0, 1, 2, 3))])
def test_color_encodings_with_row_padding(encoding, order):
    rgb = RNG.integers(0, 256, size=(5, 7, 3), dtype=np.uint8)
    rgba = np.concatenate([rgb, np.full((5, 7, 1), 255, np.uint8)], axis=2)
    px = rgba[:, :, list(order)]
    data, step = padded(px.reshape(5, -1), pad=6)
    out = decode_color(RawImage(5, 7, encoding, step, data))
    np.testing.assert_array_equal(out, rgb)


@pytest.mark.parametrize("bigendian", [False, True])
def test_depth_16uc1_millimetres(bigendian):
    mm = np.array([[0, 250, 1000], [65535, 1234, 3000]], dtype=np.uint16)
    raw = mm.astype(">u2" if bigendian else "<u2").view(np.uint8).reshape(2, -1)
    data, step = padded(raw, pad=4)
    z = decode_depth(RawImage(2, 3, "16UC1", step, data, bigendian), 0.25, 3.0)
    expected = np.array([[np.nan, 0.25, 1.0], [np.nan, 1.234, 3.0]], dtype=np.float32)
    np.testing.assert_allclose(z, expected, atol=1e-6)


@pytest.mark.parametrize("bigendian", [False, True])
def test_depth_32fc1_metres_and_invalid_values(bigendian):
    m = np.array([[0.0, np.nan, np.inf, -np.inf, 0.1, 1.5, 9.0]], dtype=np.float32)
    raw = m.astype(">f4" if bigendian else "<f4").view(np.uint8).reshape(1, -1)
    data, step = padded(raw, pad=3)
    z = decode_depth(RawImage(1, 7, "32FC1", step, data, bigendian), 0.25, 3.0)
    assert np.isnan(z[0, :5]).all()
    assert z[0, 5] == pytest.approx(1.5)
    assert np.isnan(z[0, 6])


@pytest.mark.parametrize("img,reason", [
    (RawImage(2, 2, "yuv422", 4, bytes(8)), "unknown_encoding"),
    (RawImage(2, 2, "bgra8", 8, bytes(15)), "bad_data_length"),
    (RawImage(2, 2, "bgra8", 8, bytes(17)), "bad_data_length"),
    (RawImage(2, 2, "bgra8", 6, bytes(12)), "bad_step"),
    (RawImage(0, 2, "bgra8", 8, b""), "bad_size"),
])
def test_bad_color_payloads_are_rejected_with_reason(img, reason):
    with pytest.raises(FrameRejected) as err:
        decode_color(img)
    assert err.value.reason == reason


@pytest.mark.parametrize("img,reason", [
    (RawImage(2, 2, "8UC1", 2, bytes(4)), "unknown_encoding"),
    (RawImage(2, 2, "16UC1", 4, bytes(7)), "bad_data_length"),
    (RawImage(2, 2, "32FC1", 4, bytes(8)), "bad_step"),
])
def test_bad_depth_payloads_are_rejected_with_reason(img, reason):
    with pytest.raises(FrameRejected) as err:
        decode_depth(img)
    assert err.value.reason == reason


def test_zero_depth_is_invalid_whatever_the_minimum():
    data = np.array([[0, 500]], dtype="<u2").tobytes()
    z = decode_depth(RawImage(1, 2, "16UC1", 4, data))
    assert np.isnan(z[0, 0]) and z[0, 1] == pytest.approx(0.5)
