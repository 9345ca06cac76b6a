//! Image formats, recognised by their magic bytes (never by a file name or a URL), and the
//! streaming decoder for each: raw, gzip, zstd, xz.

use std::io::{self, BufRead, Read};

use metal_protocol::deploy::ImageFormat;

/// The format whose magic `head` starts with; raw when none matches.
pub fn detect(head: &[u8]) -> ImageFormat {
    if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        ImageFormat::Zstd
    } else if head.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0x00]) {
        ImageFormat::Xz
    } else if head.starts_with(&[0x1f, 0x8b]) {
        ImageFormat::Gzip
    } else {
        ImageFormat::Raw
    }
}

/// Peeks at `input` (without consuming) and returns its format.
pub fn sniff<R: BufRead>(input: &mut R) -> io::Result<ImageFormat> {
    Ok(detect(input.fill_buf()?))
}

/// The raw bytes of `input`, decoded as `format`. Concatenated members/frames/streams are
/// all decoded, as the command-line tools do.
pub fn decoder<'a, R: BufRead + Send + 'a>(format: ImageFormat, input: R) -> io::Result<Box<dyn Read + Send + 'a>> {
    Ok(match format {
        ImageFormat::Raw => Box::new(input),
        ImageFormat::Gzip => Box::new(flate2::bufread::MultiGzDecoder::new(input)),
        ImageFormat::Zstd => Box::new(zstd::stream::read::Decoder::with_buffer(input)?),
        ImageFormat::Xz => Box::new(xz2::bufread::XzDecoder::new_multi_decoder(input)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn magic_bytes_decide() {
        assert_eq!(detect(&[0x28, 0xb5, 0x2f, 0xfd, 0x24]), ImageFormat::Zstd);
        assert_eq!(detect(b"\xfd7zXZ\x00\x00"), ImageFormat::Xz);
        assert_eq!(detect(&[0x1f, 0x8b, 0x08]), ImageFormat::Gzip);
        assert_eq!(detect(&[0x33, 0xc0, 0x8e]), ImageFormat::Raw, "an MBR boot sector");
        assert_eq!(detect(&[]), ImageFormat::Raw);
        assert_eq!(detect(&[0x1f]), ImageFormat::Raw, "too short for gzip");
    }

    #[test]
    fn every_format_round_trips() {
        use std::io::Write as _;
        let raw: Vec<u8> = (0..200_000u32).flat_map(|i| i.to_le_bytes()).collect();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&raw).unwrap();
        let gz = gz.finish().unwrap();
        let zst = zstd::encode_all(&raw[..], 1).unwrap();
        let mut xz = xz2::write::XzEncoder::new(Vec::new(), 1);
        xz.write_all(&raw).unwrap();
        let xz = xz.finish().unwrap();
        for (bytes, format) in
            [(&raw, ImageFormat::Raw), (&gz, ImageFormat::Gzip), (&zst, ImageFormat::Zstd), (&xz, ImageFormat::Xz)]
        {
            let mut input = io::BufReader::new(&bytes[..]);
            assert_eq!(sniff(&mut input).unwrap(), format);
            let mut out = Vec::new();
            decoder(format, input).unwrap().read_to_end(&mut out).unwrap();
            assert_eq!(out, raw, "{format:?}");
        }
    }
}
