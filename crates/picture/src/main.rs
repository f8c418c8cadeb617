//! `indexnow-picture`: draws what indexnow sent into an SVG file (see the library).
//!
//! ```sh
//! indexnow-picture 'host=/var/run/postgresql dbname=site user=postgres' picture.svg [SECONDS [COUNT]]
//! ```
//! SECONDS a period (default 3600: an hour), COUNT periods up to now (default 48).

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: indexnow-picture CONNINFO FILE.svg [SECONDS [COUNT]]");
        std::process::exit(2);
    }
    let number = |i: usize, default: i32| {
        args.get(i).map_or(default, |a| {
            a.parse().unwrap_or_else(|_| {
                eprintln!("indexnow-picture: {a:?} is not a whole number");
                std::process::exit(2)
            })
        })
    };
    let (seconds, count) = (number(3, 3600), number(4, 48));
    let drawn = postgres::Client::connect(&args[1], postgres::NoTls)
        .map_err(|e| e.to_string())
        .and_then(|mut client| {
            indexnow_picture::read(&mut client, seconds, count).map_err(|e| e.to_string())
        })
        .and_then(|periods| {
            indexnow_picture::draw(&periods, std::path::Path::new(&args[2]))
                .map_err(|e| e.to_string())
        });
    if let Err(e) = drawn {
        eprintln!("indexnow-picture: {e}");
        std::process::exit(1);
    }
    println!("indexnow-picture: drew {}", args[2]);
}
