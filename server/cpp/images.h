// Image filters as ops (contracts/images.py) in the C++ server, with OpenCV (Debian's libopencv-dev):
// gray, bilateral, cartoon and filters3 with the Python server's parameters; the image's size is read
// from its header and refused over the limit before anything is decoded (a decompression bomb).
#pragma once
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace images {

struct Header {
  std::string format;
  int64_t rows = 0, cols = 0;
  bool ok = false;
  std::string problem;
};

inline uint32_t be32(const std::string& d, size_t i) {
  return (uint32_t(uint8_t(d[i])) << 24) | (uint32_t(uint8_t(d[i + 1])) << 16) | (uint32_t(uint8_t(d[i + 2])) << 8) |
         uint32_t(uint8_t(d[i + 3]));
}
inline uint32_t be16(const std::string& d, size_t i) { return (uint32_t(uint8_t(d[i])) << 8) | uint8_t(d[i + 1]); }

// contracts/images.py read_header
inline Header read_header(const std::string& d) {
  Header h;
  if (d.size() >= 8 && d.compare(0, 8, "\x89PNG\r\n\x1a\n", 8) == 0) {
    h.format = "png";
    if (d.size() < 24 || d.compare(12, 4, "IHDR") != 0) {
      h.problem = "corrupt image: a PNG without its IHDR chunk";
      return h;
    }
    h.cols = be32(d, 16);
    h.rows = be32(d, 20);
    h.ok = true;
    return h;
  }
  if (d.size() >= 2 && uint8_t(d[0]) == 0xFF && uint8_t(d[1]) == 0xD8) {
    h.format = "jpeg";
    size_t i = 2;
    while (i + 4 <= d.size()) {
      if (uint8_t(d[i]) != 0xFF) break;
      uint8_t m = d[i + 1];
      if (m == 0xD8 || m == 0x01 || (m >= 0xD0 && m <= 0xD7)) {
        i += 2;
        continue;
      }
      if (m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC && i + 9 <= d.size()) {
        h.rows = be16(d, i + 5);
        h.cols = be16(d, i + 7);
        h.ok = true;
        return h;
      }
      i += 2 + be16(d, i + 2);
    }
    h.problem = "corrupt image: a JPEG without a frame header";
    return h;
  }
  h.problem = "not an image: the image is neither PNG nor JPEG";
  return h;
}

inline cv::Mat filter(const std::string& name, const cv::Mat& img) {
  cv::Mat out;
  if (name == "gray") {
    cv::cvtColor(img, out, cv::COLOR_BGR2GRAY);
  } else if (name == "bilateral") {
    cv::bilateralFilter(img, out, 9, 75.0, 75.0);
  } else {  // cartoon
    cv::Mat gray, edges, color;
    cv::cvtColor(img, gray, cv::COLOR_BGR2GRAY);
    cv::medianBlur(gray, gray, 5);
    cv::adaptiveThreshold(gray, edges, 255, cv::ADAPTIVE_THRESH_MEAN_C, cv::THRESH_BINARY, 9, 9);
    cv::bilateralFilter(img, color, 9, 250.0, 250.0);
    cv::bitwise_and(color, color, out, edges);
  }
  return out;
}

inline std::vector<std::string> filters_of(const std::string& op) {
  if (op == "filters3") return {"cartoon", "bilateral", "gray"};
  return {op};
}

inline std::string encode(const cv::Mat& img, const std::string& format) {
  std::vector<uchar> buf;
  std::vector<int> params = format == "png" ? std::vector<int>{cv::IMWRITE_PNG_COMPRESSION, 1}
                                            : std::vector<int>{cv::IMWRITE_JPEG_QUALITY, 95};
  cv::imencode(format == "png" ? ".png" : ".jpg", img, buf, params);
  return std::string(buf.begin(), buf.end());
}

}  // namespace images
