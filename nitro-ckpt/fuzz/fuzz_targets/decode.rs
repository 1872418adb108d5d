//! Feeds arbitrary bytes to the decoder twice: as they are (exercising the
//! header, footer and checksum checks) and resealed with a valid index
//! checksum (so the CBOR index decoder and table checks see hostile input).
//! Any `Result` is fine; a panic, abort or huge allocation is a bug.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = nitro_ckpt::decode(data);
    let mut resealed = data.to_vec();
    nitro_ckpt::format::reseal(&mut resealed);
    if let Ok(mut reader) = nitro_ckpt::Reader::from_bytes(&resealed) {
        for name in reader.names() {
            let _ = reader.tensor(&name);
        }
    }
});
