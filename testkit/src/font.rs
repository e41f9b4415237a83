//! The font plotters draws text with (`ab_glyph` reads a TTF file): DejaVu Sans (Debian:
//! `apt-get install fonts-dejavu-core`), else whatever `fc-match sans-serif` names.

use std::path::{Path, PathBuf};

use plotters::style::FontStyle;

/// A plotting program's arguments, `--out PATH` (else `default_out`) and `--font PATH`, with
/// the font registered: where to write the picture.
pub fn out_with_font(default_out: &str) -> Result<PathBuf, String> {
    let mut out = PathBuf::from(default_out);
    let mut font = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--out" => out = args.next().ok_or("--out needs a path")?.into(),
            "--font" => font = Some(PathBuf::from(args.next().ok_or("--font needs a path")?)),
            _ => {
                return Err(format!(
                    "unknown argument `{a}`; expected --out PATH, --font PATH"
                ));
            }
        }
    }
    register(font.as_deref())?;
    Ok(out)
}

/// Registers `given`, else the first TTF font found, as plotters' "sans-serif".
pub fn register(given: Option<&Path>) -> Result<(), String> {
    let path = match given {
        Some(p) => p.to_path_buf(),
        None => find()
            .ok_or("no TTF font found: install fonts-dejavu-core (Debian) or pass --font PATH")?,
    };
    let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    // plotters keeps registered fonts for the life of the program.
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
        .map_err(|_| format!("{}: not a TTF font plotters can read", path.display()))
}

fn find() -> Option<PathBuf> {
    let known = [
        "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/TTF/DejaVuSans.ttf",
        "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    ];
    if let Some(p) = known.iter().map(PathBuf::from).find(|p| p.is_file()) {
        return Some(p);
    }
    let out = std::process::Command::new("fc-match")
        .args(["-f", "%{file}", "sans-serif:fontformat=TrueType"])
        .output()
        .ok()?;
    let p = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    p.is_file().then_some(p)
}
