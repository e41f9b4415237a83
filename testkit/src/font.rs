//! The font plotters draws text with (`ab_glyph` reads a TTF file): DejaVu Sans (Debian:
//! `apt-get install fonts-dejavu-core`), else whatever `fc-match sans-serif` names.

use std::path::{Path, PathBuf};

use plotters::style::FontStyle;

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
