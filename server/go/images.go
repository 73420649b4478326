// Image filters as ops (contracts/images.py) in the Go server: `gray` only, with Go's own code (the
// standard library's image/png and image/jpeg, and OpenCV's fixed-point luma written out here):
// Debian has no OpenCV binding for Go. bilateral, cartoon and filters3 are refused as unknown ops.
package main

import (
	"bytes"
	"fmt"
	"image"
	"image/jpeg"
	"image/png"
	"math"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protowire"
)

// imageOps are the image ops this server has, beside the matrix ops.
var imageOps = map[string]bool{"gray": true}

// allImageOps are every server's image ops: the ones this server lacks are refused as unknown.
var allImageOps = map[string]bool{"gray": true, "bilateral": true, "cartoon": true, "filters3": true}

type imageMessage struct {
	format string
	data   []byte
}

// parseImages reads an OpRequest's `images` (field 3), each an Image {format = 1, data = 2}.
func parseImages(b []byte) ([]imageMessage, error) {
	var out []imageMessage
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, errMalformed
		}
		b = b[n:]
		if num == 3 && typ == protowire.BytesType {
			v, k := protowire.ConsumeBytes(b)
			if k < 0 {
				return nil, errMalformed
			}
			img, err := parseImage(v)
			if err != nil {
				return nil, err
			}
			out = append(out, img)
			n = k
		} else {
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return nil, errMalformed
		}
		b = b[n:]
	}
	return out, nil
}

func parseImage(b []byte) (m imageMessage, err error) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return m, errMalformed
		}
		b = b[n:]
		if (num == 1 || num == 2) && typ == protowire.BytesType {
			var v []byte
			v, n = protowire.ConsumeBytes(b)
			if num == 1 {
				m.format = string(v)
			} else {
				m.data = v
			}
		} else {
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return m, errMalformed
		}
		b = b[n:]
	}
	return m, nil
}

// decodeImage reads the header first and refuses an image over the limit undecoded (a bomb).
func decodeImage(data []byte, maxBody int64) (image.Image, string, error) {
	cfg, format, err := image.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		if err == image.ErrFormat {
			return nil, "", badInput("not an image", "the image is neither PNG nor JPEG")
		}
		return nil, "", badInput("corrupt image", "the image's header does not read: "+err.Error())
	}
	if cfg.Width < 1 || cfg.Height < 1 {
		return nil, "", badInput("corrupt image", fmt.Sprintf("%dx%d pixels", cfg.Width, cfg.Height))
	}
	decoded := int64(cfg.Width) * int64(cfg.Height) * 3
	if decoded > maxBody {
		return nil, "", overLimit("image too large", fmt.Sprintf(
			"a %dx%d %s decodes to %d bytes; the server holds at most %d (%s %d or more)",
			cfg.Width, cfg.Height, format, decoded, maxBody, fix, int64(math.Ceil(float64(decoded)/mib))))
	}
	img, _, err := image.Decode(bytes.NewReader(data))
	if err != nil {
		return nil, "", badInput("corrupt image", "the "+format+" does not decode: "+err.Error())
	}
	return img, format, nil
}

// luma is OpenCV's cvtColor(BGR2GRAY) in fixed point: (4899 R + 9617 G + 1868 B + 8192) >> 14.
func luma(r, g, b uint32) uint8 { return uint8((4899*r + 9617*g + 1868*b + 8192) >> 14) }

// gray is the `gray` filter: one channel of luma per pixel.
func gray(src image.Image) *image.Gray {
	bounds := src.Bounds()
	w, h := bounds.Dx(), bounds.Dy()
	out := image.NewGray(image.Rect(0, 0, w, h))
	switch s := src.(type) {
	case *image.RGBA: // an opaque PNG: R, G, B, A bytes, unpremultiplied since A is 255
		for y := 0; y < h; y++ {
			row, dst := s.Pix[y*s.Stride:y*s.Stride+4*w], out.Pix[y*out.Stride:y*out.Stride+w]
			for x := range dst {
				dst[x] = luma(uint32(row[4*x]), uint32(row[4*x+1]), uint32(row[4*x+2]))
			}
		}
	case *image.NRGBA: // a PNG with alpha: OpenCV drops the alpha
		for y := 0; y < h; y++ {
			row, dst := s.Pix[y*s.Stride:y*s.Stride+4*w], out.Pix[y*out.Stride:y*out.Stride+w]
			for x := range dst {
				dst[x] = luma(uint32(row[4*x]), uint32(row[4*x+1]), uint32(row[4*x+2]))
			}
		}
	default: // YCbCr (JPEG), gray, paletted: through the colour model
		for y := 0; y < h; y++ {
			for x := 0; x < w; x++ {
				r, g, b, _ := src.At(bounds.Min.X+x, bounds.Min.Y+y).RGBA()
				out.Pix[y*out.Stride+x] = luma(r>>8, g>>8, b>>8)
			}
		}
	}
	return out
}

func encodeImage(img image.Image, format string) []byte {
	var buf bytes.Buffer
	if format == "jpeg" {
		jpeg.Encode(&buf, img, &jpeg.Options{Quality: 95})
	} else {
		(&png.Encoder{CompressionLevel: png.BestSpeed}).Encode(&buf, img)
	}
	return buf.Bytes()
}

// runImageStages is server/image_stages.py: the image decoded in the decode stage (the message was
// parsed in it already), filtered, and encoded in its own format.
func runImageStages(body []byte, op string, operands int, clock *stageClock, maxBody int64) ([]byte, error) {
	if !imageOps[op] {
		return nil, refuse(codes.Unimplemented, "unknown operation",
			fmt.Sprintf("'%s'; known: mul, inv, log, gray (the Go server has no OpenCV)", op))
	}
	var img image.Image
	var format string
	err := clock.stage("decode", func() error {
		if operands > 0 {
			return badInput("malformed body", fmt.Sprintf("'%s' is an image op: send images, not operands", op))
		}
		images, err := parseImages(body)
		if err != nil {
			return badInput("malformed protobuf", "request is not an OpRequest: "+err.Error())
		}
		if len(images) != 1 {
			return badInput("wrong number of images", fmt.Sprintf("the request carries %d images; an image op takes 1", len(images)))
		}
		img, format, err = decodeImage(images[0].data, maxBody)
		return err
	})
	if err != nil {
		return nil, err
	}
	var out *image.Gray
	clock.stage("compute", func() error { out = gray(img); return nil })
	img = nil
	var reply []byte
	clock.stage("encode", func() error {
		var m []byte
		m = protowire.AppendTag(m, 1, protowire.BytesType)
		m = protowire.AppendString(m, format)
		m = protowire.AppendTag(m, 2, protowire.BytesType)
		m = protowire.AppendBytes(m, encodeImage(out, format))
		reply = protowire.AppendTag(nil, 2, protowire.BytesType)
		reply = protowire.AppendBytes(reply, m)
		return nil
	})
	return reply, nil
}
