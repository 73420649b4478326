# frozen_string_literal: true

# Image filters as ops (contracts/images.py) in the Ruby server: `gray` only, with Ruby's own code
# (Debian has no OpenCV binding for Ruby): a PNG decoder and encoder over the standard library's zlib,
# and OpenCV's fixed-point luma, (4899 R + 9617 G + 1868 B + 8192) >> 14. It reads 8-bit, non-interlaced
# gray, gray+alpha, RGB and RGBA PNGs (what OpenCV and the project's client write); JPEG and other PNG
# kinds are refused in one line. bilateral, cartoon and filters3 are refused as unknown ops. Every
# row is unfiltered and every pixel weighed by the interpreter: see docs/server.md for its speed.
require 'zlib'

module OffloadServer
  module Images
    OPS = %w[gray].freeze # this server's image ops
    ALL_OPS = %w[gray bilateral cartoon filters3].freeze # every server's: the others are unknown here
    SIGNATURE = "\x89PNG\r\n\x1a\n".b
    CHANNELS = { 0 => 1, 2 => 3, 4 => 2, 6 => 4 }.freeze # PNG colour type -> samples per pixel

    # A decoded PNG: its rows (binary Strings of `channels` bytes per pixel).
    Decoded = Struct.new(:rows, :width, :height, :channels)

    def self.refuse(error, detail) = OffloadServer.bad_input(error, detail)

    # contracts/images.py read_header, then every chunk's CRC; the pixels are checked against the limit
    # from IHDR before anything is inflated (a decompression bomb), and inflating stops at the size
    # IHDR declares.
    def self.decode(data, max_body)
      data = data.b
      raise refuse('unsupported image', 'the Ruby server decodes PNG only') if data.start_with?("\xff\xd8".b)
      raise refuse('not an image', 'the image is neither PNG nor JPEG') unless data.start_with?(SIGNATURE)

      header, idat = chunks(data)
      width, height, depth, colour, _, _, interlace = header.unpack('NNCCCCC')
      raise refuse('corrupt image', "#{width}x#{height} pixels") if width < 1 || height < 1

      decoded = width * height * 3
      if decoded > max_body
        raise OffloadServer.over_limit('image too large', "a #{width}x#{height} png decodes to #{decoded} bytes; " \
                                                          "the server holds at most #{max_body} (#{FIX} #{OffloadServer.megabytes(decoded)} or more)")
      end
      channels = CHANNELS[colour]
      unless depth == 8 && channels && interlace.zero?
        raise refuse('unsupported image', "a #{depth}-bit PNG of colour type #{colour}, interlace #{interlace}; " \
                                          'the Ruby server reads 8-bit, non-interlaced gray, RGB and RGBA')
      end
      raw = inflate(idat, height * (1 + width * channels))
      Decoded.new(unfilter(raw, width, height, channels), width, height, channels)
    end

    def self.chunks(data)
      pos = 8
      header = nil
      idat = []
      while pos + 12 <= data.bytesize
        length, type = data.byteslice(pos, 8).unpack('Na4')
        body = data.byteslice(pos + 8, length)
        crc = data.byteslice(pos + 8 + length, 4)
        raise refuse('corrupt image', "a truncated #{type} chunk") if body.nil? || body.bytesize != length || crc.nil? || crc.bytesize != 4
        raise refuse('corrupt image', "the #{type} chunk's CRC is wrong") if Zlib.crc32(type + body) != crc.unpack1('N')

        header ||= body if type == 'IHDR'
        idat << body if type == 'IDAT'
        return [header, idat] if type == 'IEND' && header

        pos += 12 + length
      end
      raise refuse('corrupt image', 'a PNG without its IHDR, IDAT or IEND chunk')
    end

    def self.inflate(idat, expected)
      zi = Zlib::Inflate.new
      out = String.new(capacity: expected, encoding: Encoding::BINARY)
      idat.each do |part|
        part.each_char.each_slice(1 << 16) do |slice| # at most ~64 MiB out per 64 KiB in
          out << zi.inflate(slice.join)
          raise refuse('corrupt image', 'the pixel data inflates past its declared size') if out.bytesize > expected
        end
      end
      raise refuse('corrupt image', "#{out.bytesize} bytes of pixel data; the header declares #{expected}") if out.bytesize != expected

      out
    rescue Zlib::Error => e
      raise refuse('corrupt image', "the pixel data does not inflate: #{e.message}")
    ensure
      zi&.close
    end

    # PNG's five row filters, undone in place (Arrays of bytes; `prev` the row above, unfiltered).
    def self.unfilter(raw, width, height, bpp)
      stride = width * bpp
      prev = Array.new(stride, 0)
      Array.new(height) do |y|
        type = raw.getbyte(y * (stride + 1))
        cur = raw.byteslice(y * (stride + 1) + 1, stride).bytes
        unfilter_row(type, cur, prev, bpp, stride)
        prev = cur
        cur.pack('C*')
      end
    end

    def self.unfilter_row(type, cur, prev, bpp, n)
      i = 0
      case type
      when 0 then nil
      when 1
        i = bpp
        while i < n
          cur[i] = (cur[i] + cur[i - bpp]) & 255
          i += 1
        end
      when 2
        while i < n
          cur[i] = (cur[i] + prev[i]) & 255
          i += 1
        end
      when 3
        while i < n
          left = i >= bpp ? cur[i - bpp] : 0
          cur[i] = (cur[i] + ((left + prev[i]) >> 1)) & 255
          i += 1
        end
      when 4
        while i < n
          a = i >= bpp ? cur[i - bpp] : 0
          b = prev[i]
          c = i >= bpp ? prev[i - bpp] : 0
          p = a + b - c
          pa = (p - a).abs
          pb = (p - b).abs
          pc = (p - c).abs
          cur[i] = (cur[i] + (pa <= pb && pa <= pc ? a : (pb <= pc ? b : c))) & 255
          i += 1
        end
      else raise refuse('corrupt image', "row filter #{type}")
      end
    end

    # The `gray` filter: one byte of luma per pixel (a gray PNG's sample kept as it is).
    def self.gray(img)
      ch = img.channels
      img.rows.map do |row|
        px = row.bytes
        next (ch == 1 ? row : px.each_slice(2).map(&:first).pack('C*')) if ch < 3

        out = Array.new(img.width)
        i = 0
        x = 0
        while x < img.width
          out[x] = (4899 * px[i] + 9617 * px[i + 1] + 1868 * px[i + 2] + 8192) >> 14
          i += ch
          x += 1
        end
        out.pack('C*')
      end
    end

    def self.chunk(type, body) = [body.bytesize].pack('N') + type + body + [Zlib.crc32(type + body)].pack('N')

    # An 8-bit gray PNG, every row unfiltered (filter 0), deflated at zlib's fastest level.
    def self.encode_gray(rows, width)
      raw = String.new(capacity: rows.size * (width + 1), encoding: Encoding::BINARY)
      rows.each { |r| raw << "\x00".b << r }
      SIGNATURE + chunk('IHDR', [width, rows.size, 8, 0, 0, 0, 0].pack('NNCCCCC')) +
        chunk('IDAT', Zlib::Deflate.deflate(raw, Zlib::BEST_SPEED)) + chunk('IEND', ''.b)
    end

    # server/image_stages.py's decode stage after the message is parsed: its one image, decoded.
    def self.decode_request(msg, max_body)
      op = msg.op
      raise Refused.new(Codes::UNIMPLEMENTED, 'unknown operation', "'#{op}'; known: mul, inv, log, gray (the Ruby server has no OpenCV)") unless OPS.include?(op)
      raise OffloadServer.bad_input('malformed body', "'#{op}' is an image op: send images, not operands") unless msg.operands.empty?
      raise OffloadServer.bad_input('wrong number of images', "the request carries #{msg.images.size} images; an image op takes 1") unless msg.images.size == 1

      decode(msg.images[0].data, max_body)
    end

    # Then compute (gray) and encode, each a stage.
    def self.finish(img, clock)
      rows = clock.stage('compute') { gray(img) }
      clock.stage('encode') do
        image = Offload::V1::Image.new(format: 'png', data: encode_gray(rows, img.width))
        Offload::V1::OpReply.encode(Offload::V1::OpReply.new(images: [image]))
      end
    end
  end
end
