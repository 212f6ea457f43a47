use super::*;

fn scalars_of(events: &[Event]) -> Vec<(i64, String, f32)> {
    let mut out = Vec::new();
    for e in events {
        if let Some(What::Summary(s)) = &e.what {
            for v in &s.value {
                if let Some(Content::SimpleValue(x)) = v.value {
                    out.push((e.step, v.tag.clone(), x));
                }
            }
        }
    }
    out
}

#[test]
fn a_file_holds_its_version_then_every_event_as_written() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = EventWriter::create(dir.path()).unwrap();
    w.scalars(1, &[("loss", 0.5), ("reward/mean", 0.25)])
        .unwrap();
    w.text("config", 0, "rule = \"ba\"").unwrap();
    w.histogram("len/pos", 1, &[1.0, 2.0, 2.0, 9.0, f64::NAN], 4)
        .unwrap();
    // Read back while the writer is still open: nothing waits in a buffer.
    let (events, torn) = read_events(w.path()).unwrap();
    assert!(!torn);
    assert_eq!(
        events[0].what,
        Some(What::FileVersion("brain.Event:2".into()))
    );
    assert_eq!(
        scalars_of(&events),
        vec![(1, "loss".into(), 0.5), (1, "reward/mean".into(), 0.25)]
    );
    let name = w.path().file_name().unwrap().to_str().unwrap();
    assert!(name.starts_with("events.out.tfevents."), "{name}");
    let Some(What::Summary(s)) = &events[3].what else {
        panic!("no histogram")
    };
    let Some(Content::Histo(h)) = &s.value[0].value else {
        panic!("no histogram")
    };
    assert_eq!((h.min, h.max, h.num, h.sum), (1.0, 9.0, 4.0, 14.0));
    assert_eq!(h.bucket_limit, vec![3.0, 5.0, 7.0, 9.0]);
    assert_eq!(h.bucket, vec![3.0, 0.0, 0.0, 1.0]);
}

#[test]
fn a_resumed_run_continues_the_file_without_a_step_twice() {
    let dir = tempfile::tempdir().unwrap();
    let path = {
        let mut w = EventWriter::create(dir.path()).unwrap();
        for step in 1..=5 {
            w.scalars(step, &[("loss", step as f64)]).unwrap();
        }
        w.path().to_path_buf()
    };
    // A kill in the middle of a write leaves a torn record.
    let mut f = OpenOptions::new().append(true).open(&path).unwrap();
    f.write_all(&record::frame(b"torn")[..9]).unwrap();
    assert!(read_events(&path).unwrap().1);
    // Resumed from the checkpoint of step 3: steps 4 and 5 are logged again.
    let mut w = EventWriter::resume(dir.path(), 3).unwrap();
    assert_eq!(w.path(), path);
    for step in 4..=6 {
        w.scalars(step, &[("loss", 10.0 * step as f64)]).unwrap();
    }
    let (events, torn) = read_events(&path).unwrap();
    assert!(!torn);
    let steps: Vec<(i64, f32)> = scalars_of(&events).iter().map(|s| (s.0, s.2)).collect();
    assert_eq!(
        steps,
        vec![
            (1, 1.0),
            (2, 2.0),
            (3, 3.0),
            (4, 40.0),
            (5, 50.0),
            (6, 60.0)
        ]
    );
    assert_eq!(event_files(dir.path()).unwrap().len(), 1);
}

#[test]
fn histograms_of_equal_or_no_values() {
    assert!(histogram(&[], 10).is_none());
    assert!(histogram(&[f64::NAN], 10).is_none());
    let h = histogram(&[4.0, 4.0], 10).unwrap();
    assert_eq!((h.bucket_limit, h.bucket), (vec![4.0], vec![2.0]));
}

#[test]
fn a_restart_leaves_one_fresh_file() {
    let dir = tempfile::tempdir().unwrap();
    let old = {
        let mut w = EventWriter::create(dir.path()).unwrap();
        w.scalars(1, &[("loss", 1.0)]).unwrap();
        w.path().to_path_buf()
    };
    std::fs::rename(&old, dir.path().join("events.out.tfevents.1.old")).unwrap();
    let w = EventWriter::restart(dir.path()).unwrap();
    assert_eq!(
        event_files(dir.path()).unwrap(),
        vec![w.path().to_path_buf()]
    );
    let (events, _) = read_events(w.path()).unwrap();
    assert_eq!(events.len(), 1, "the version record only");
}
