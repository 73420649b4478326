// Image filters as ops (contracts/images.py) in the Java server, with OpenCV's Java binding (Debian's
// libopencv-java): gray, bilateral, cartoon and filters3 with the Python server's parameters. The
// image's size is read from its header and refused over the limit before it is decoded (a bomb).
package offload.server;

import com.google.protobuf.ByteString;
import io.grpc.Status;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import offload.v1.OffloadOuterClass.Image;
import offload.v1.OffloadOuterClass.OpReply;
import offload.v1.OffloadOuterClass.OpRequest;
import org.opencv.core.Core;
import org.opencv.core.Mat;
import org.opencv.core.MatOfByte;
import org.opencv.core.MatOfInt;
import org.opencv.imgcodecs.Imgcodecs;
import org.opencv.imgproc.Imgproc;

final class Images {
  static final Set<String> OPS = Set.of("gray", "bilateral", "cartoon", "filters3");

  static {
    System.loadLibrary(Core.NATIVE_LIBRARY_NAME); // /usr/lib/jni/libopencv_java460.so
  }

  private Images() {}

  /** The decoded image and the format it came in. */
  static final class Decoded {
    final Mat image;
    final String format;

    Decoded(Mat image, String format) {
      this.image = image;
      this.format = format;
    }
  }

  static long be(byte[] d, int i, int n) {
    long v = 0;
    for (int k = 0; k < n; k++) v = (v << 8) | (d[i + k] & 0xFF);
    return v;
  }

  // contracts/images.py read_header: {format, rows, cols}
  static Object[] header(byte[] d) throws OffloadServer.Refused {
    byte[] png = {(byte) 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    boolean isPng = d.length >= 8;
    for (int k = 0; isPng && k < 8; k++) isPng = d[k] == png[k];
    if (isPng) {
      if (d.length < 24 || d[12] != 'I' || d[13] != 'H' || d[14] != 'D' || d[15] != 'R') {
        throw OffloadServer.badInput("corrupt image", "a PNG without its IHDR chunk");
      }
      return new Object[] {"png", be(d, 20, 4), be(d, 16, 4)};
    }
    if (d.length >= 2 && (d[0] & 0xFF) == 0xFF && (d[1] & 0xFF) == 0xD8) {
      int i = 2;
      while (i + 4 <= d.length && (d[i] & 0xFF) == 0xFF) {
        int m = d[i + 1] & 0xFF;
        if (m == 0xD8 || m == 0x01 || (m >= 0xD0 && m <= 0xD7)) {
          i += 2;
          continue;
        }
        if (m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC && i + 9 <= d.length) {
          return new Object[] {"jpeg", be(d, i + 5, 2), be(d, i + 7, 2)};
        }
        i += 2 + (int) be(d, i + 2, 2);
      }
      throw OffloadServer.badInput("corrupt image", "a JPEG without a frame header");
    }
    throw OffloadServer.badInput("not an image", "the image is neither PNG nor JPEG");
  }

  // The decode stage's second half: the message is parsed; its one image decoded.
  static Decoded decode(OpRequest msg, long maxBody) throws OffloadServer.Refused {
    String op = msg.getOp();
    if (msg.getOperandsCount() > 0) {
      throw OffloadServer.badInput("malformed body", "'" + op + "' is an image op: send images, not operands");
    }
    if (msg.getImagesCount() != 1) {
      throw OffloadServer.badInput(
          "wrong number of images", "the request carries " + msg.getImagesCount() + " images; an image op takes 1");
    }
    byte[] data = msg.getImages(0).getData().toByteArray();
    Object[] h = header(data);
    String format = (String) h[0];
    long rows = (Long) h[1], cols = (Long) h[2];
    if (rows < 1 || cols < 1) throw OffloadServer.badInput("corrupt image", cols + "x" + rows + " pixels");
    long decoded = rows * cols * 3;
    if (decoded > maxBody) {
      throw OffloadServer.overLimit(
          "image too large",
          "a " + cols + "x" + rows + " " + format + " decodes to " + decoded + " bytes; the server holds at most "
              + maxBody + " (" + OffloadServer.FIX + " " + OffloadServer.mb(decoded) + " or more)");
    }
    Mat img;
    try {
      img = Imgcodecs.imdecode(new MatOfByte(data), Imgcodecs.IMREAD_COLOR);
    } catch (RuntimeException exc) {
      img = new Mat();
    }
    if (img.empty() || img.rows() != rows || img.cols() != cols) {
      throw OffloadServer.badInput("corrupt image", "the " + format + " does not decode");
    }
    return new Decoded(img, format);
  }

  static Mat filter(String name, Mat img) {
    Mat out = new Mat();
    switch (name) {
      case "gray" -> Imgproc.cvtColor(img, out, Imgproc.COLOR_BGR2GRAY);
      case "bilateral" -> Imgproc.bilateralFilter(img, out, 9, 75.0, 75.0);
      default -> { // cartoon
        Mat gray = new Mat(), edges = new Mat(), color = new Mat();
        Imgproc.cvtColor(img, gray, Imgproc.COLOR_BGR2GRAY);
        Imgproc.medianBlur(gray, gray, 5);
        Imgproc.adaptiveThreshold(gray, edges, 255, Imgproc.ADAPTIVE_THRESH_MEAN_C, Imgproc.THRESH_BINARY, 9, 9);
        Imgproc.bilateralFilter(img, color, 9, 250.0, 250.0);
        Core.bitwise_and(color, color, out, edges);
        gray.release();
        edges.release();
        color.release();
      }
    }
    return out;
  }

  static byte[] encode(Mat img, String format) {
    MatOfByte buf = new MatOfByte();
    if (format.equals("png")) {
      Imgcodecs.imencode(".png", img, buf, new MatOfInt(Imgcodecs.IMWRITE_PNG_COMPRESSION, 1));
    } else {
      Imgcodecs.imencode(".jpg", img, buf, new MatOfInt(Imgcodecs.IMWRITE_JPEG_QUALITY, 95));
    }
    return buf.toArray();
  }

  // server/image_stages.py after decode: filter (the op's filters, in order), then encode.
  static byte[] run(String op, Decoded in, OffloadServer.StageClock clock) throws OffloadServer.Refused {
    List<String> names = op.equals("filters3") ? List.of("cartoon", "bilateral", "gray") : List.of(op);
    List<Mat> outputs =
        clock.stage(
            "compute",
            () -> {
              List<Mat> out = new ArrayList<>();
              for (String name : names) out.add(filter(name, in.image));
              return out;
            });
    in.image.release();
    return clock.stage(
        "encode",
        () -> {
          OpReply.Builder reply = OpReply.newBuilder();
          for (Mat o : outputs) {
            reply.addImages(Image.newBuilder().setFormat(in.format).setData(ByteString.copyFrom(encode(o, in.format))));
            o.release();
          }
          return reply.build().toByteArray();
        });
  }

  static OffloadServer.Refused unknown(String name) {
    return new OffloadServer.Refused(Status.Code.UNIMPLEMENTED, "unknown operation", "'" + name + "'");
  }
}
